"""The decode step's rotary turn and key/value cache write (graph_decode.py) as one Triton kernel.

In torch the step turns queries and keys with five kernels (`fused.rotate`: a negation, a cat, two
products and a sum) and writes keys and values with two `index_copy_`: seven launches a layer and
token, ~0.1 s of a 1.15 s generation at the 3B shape (36 layers x 128 tokens; issue 36). Here one
program per row and head reads the head's values from the fused qkv projection and writes the
turned query to a buffer, the turned key or the value to the cache column. The arithmetic is the
torch form's, rounded where it rounds (each product to the values' dtype, then their sum), but the
compiler may fuse a product into the sum (one rounding fewer): on an H200 a quarter of the turned
values differ from torch's, by at most one unit of the products' size, in float32 and bfloat16
alike. Values are copied exactly.
"""

from __future__ import annotations

import torch

from orchestry.agents.lora.cuda.triton_support import tl, triton

if triton is not None:

    @triton.jit
    def rotary_cache_kernel(
        y, cos, sin, q_out, keys, values, column,
        heads, kv, y_row, cos_row, q_row, c_row, c_head, c_col,
        D: tl.constexpr,
    ):  # fmt: skip
        row, head = tl.program_id(0), tl.program_id(1)
        at = tl.arange(0, D)
        src = y + row.to(tl.int64) * y_row + head * D
        x = tl.load(src + at)
        col = tl.load(column).to(tl.int64)
        if head < heads + kv:
            half: tl.constexpr = D // 2
            partner = tl.load(src + (at + half) % D).to(tl.float32)
            turned = tl.where(at < half, -partner, partner)  # negation is exact in any dtype
            c = tl.load(cos + row.to(tl.int64) * cos_row + at)
            s = tl.load(sin + row.to(tl.int64) * cos_row + at)
            first = (x.to(tl.float32) * c.to(tl.float32)).to(x.dtype)
            second = (turned * s.to(tl.float32)).to(x.dtype)
            out = (first.to(tl.float32) + second.to(tl.float32)).to(x.dtype)
            if head < heads:
                tl.store(q_out + row.to(tl.int64) * q_row + head * D + at, out)
            else:
                place = row.to(tl.int64) * c_row + (head - heads) * c_head + col * c_col
                tl.store(keys + place + at, out)
        else:
            place = row.to(tl.int64) * c_row + (head - heads - kv) * c_head + col * c_col
            tl.store(values + place + at, x)


def available(head_dim: int) -> bool:
    """Triton is installed and a head's values fit one power-of-two range."""
    return triton is not None and head_dim & (head_dim - 1) == 0


def rotary_into_cache(
    y: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    cache: torch.Tensor,
    column: torch.Tensor,
    heads: int,
    kv: int,
) -> torch.Tensor:
    """y: one token's projections [rows, heads + 2 kv, d] (contiguous per head); cos, sin: [rows,
    d]; cache: [2, rows, kv, width, d]; column: [1], the cache column to write. Writes the turned
    keys and the values at that column; returns the turned queries [rows, heads, d]."""
    rows, _, d = y.shape
    q = torch.empty((rows, heads, d), dtype=y.dtype, device=y.device)
    keys, values = cache[0], cache[1]
    assert y.stride(2) == 1 and keys.stride(3) == 1 and cos.stride() == sin.stride()
    assert cos.stride(1) == 1
    rotary_cache_kernel[(rows, heads + 2 * kv)](
        y, cos, sin, q, keys, values, column,
        heads, kv, y.stride(0), cos.stride(0), q.stride(0),
        keys.stride(0), keys.stride(1), keys.stride(2),
        D=d,
    )  # fmt: skip
    return q
