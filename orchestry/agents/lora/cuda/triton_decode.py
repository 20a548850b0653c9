"""The decode step's attention over the KV cache and its gated MLP activation as Triton kernels.

Profiled at the 3B shape (issue 36; 36 layers x 128 tokens of 128 rows), torch's forms cost:
- attention: PyTorch's memory-efficient SDPA kernel, 38 us a layer and token (~175 ms of a 0.98 s
  generation), plus two elementwise kernels turning the boolean mask into an additive one (~7 us).
  It handles each query head as its own sequence, so the 8 query heads of a key/value head read
  its keys and values 8 times, and it reads every column of the cache, those not yet written too.
- the activation: `act(gate) * up` over two strided halves of the fused gate/up output, two
  elementwise kernels of ~6.7 us each.

`decode_attention` runs one program per row and key/value head: the head's query heads as one
block, keys and values read once, and only the columns up to the one being written (read from
the device, so a CUDA graph replays it). Softmax is the online form of flash attention, in
float32; the probabilities meet the values in the values' dtype, as torch's fused kernels do.
At the 3B shape it takes 14.1 us a call on an H200 (benchmarks/decode_kernels.py, 128 rows). Two
other layouts measured slower and were removed: the G rows of a group reading their shared prompt
once (447f04e: 20.6 us), and a row's columns split over 2, 4 or 8 programs merged by a second
kernel (flash-decoding, 681cf46: 20.1, 25.1, 29.4 us at 64 columns a block).
`silu_mul` reads both halves and writes `silu(gate) * up` rounded where torch rounds: the
activation to the dtype, then the product. `GatedSilu` is the same with its backward, for the
update's written-out forward.
"""

from __future__ import annotations

import torch

from orchestry.agents.lora.cuda.triton_support import tl, triton, usable

COLUMNS = 64
"""Key columns an attention program reads at a time."""
WIDTH = 1024
"""Activation entries a program covers."""


if triton is not None:

    @triton.jit
    def attention_kernel(
        q, keys, values, real, column, out, scale,
        group, q_row, c_row, c_head, c_col, real_row,
        G: tl.constexpr, D: tl.constexpr, N: tl.constexpr, PRECISION: tl.constexpr,
    ):  # fmt: skip
        row, head = tl.program_id(0).to(tl.int64), tl.program_id(1)
        g, at = tl.arange(0, G), tl.arange(0, D)
        mine = (g < group)[:, None]
        place = row * q_row + (head * group + g)[:, None] * D + at[None, :]
        query = tl.load(q + place, mask=mine, other=0.0)
        end = tl.load(column).to(tl.int32) + 1  # the column written this step is the last read
        base = row * c_row + head * c_head
        top = tl.full([G], -1.0e30, tl.float32)  # finite: a block with no key left gives exp(-inf)
        mass = tl.zeros([G], tl.float32)
        acc = tl.zeros([G, D], tl.float32)
        for start in range(0, end, N):
            cols = start + tl.arange(0, N)
            inside = cols < end
            seen = inside & (tl.load(real + row * real_row + cols, mask=inside, other=0) != 0)
            at_col = base + cols[:, None].to(tl.int64) * c_col + at[None, :]
            # columns of no token (padding) are not read either: p is 0 there, as is what enters
            k = tl.load(keys + at_col, mask=seen[:, None], other=0.0)
            s = tl.dot(query, tl.trans(k), input_precision=PRECISION)
            s = tl.where(seen[None, :], s * scale, float("-inf"))
            new_top = tl.maximum(top, tl.max(s, axis=1))
            shrink = tl.exp(top - new_top)
            p = tl.exp(s - new_top[:, None])
            mass = mass * shrink + tl.sum(p, axis=1)
            v = tl.load(values + at_col, mask=seen[:, None], other=0.0)
            acc = acc * shrink[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            top = new_top
        result = acc / mass[:, None]
        tl.store(out + place, result.to(out.dtype.element_ty), mask=mine)

    @triton.jit
    def silu_mul_kernel(y, out, width, y_row, out_row, BLOCK: tl.constexpr):
        row, part = tl.program_id(0).to(tl.int64), tl.program_id(1)
        at = part * BLOCK + tl.arange(0, BLOCK)
        inside = at < width
        gate = tl.load(y + row * y_row + at, mask=inside, other=0.0)
        up = tl.load(y + row * y_row + width + at, mask=inside, other=0.0)
        x = gate.to(tl.float32)
        act = (x / (1.0 + tl.exp(-x))).to(gate.dtype)
        product = (act.to(tl.float32) * up.to(tl.float32)).to(gate.dtype)
        tl.store(out + row * out_row + at, product, mask=inside)

    @triton.jit
    def silu_mul_backward_kernel(
        y, grad, dy, width, y_row, grad_row, dy_row, BLOCK: tl.constexpr
    ):  # fmt: skip
        row, part = tl.program_id(0).to(tl.int64), tl.program_id(1)
        at = part * BLOCK + tl.arange(0, BLOCK)
        inside = at < width
        gate = tl.load(y + row * y_row + at, mask=inside, other=0.0)
        up = tl.load(y + row * y_row + width + at, mask=inside, other=0.0)
        g = tl.load(grad + row * grad_row + at, mask=inside, other=0.0).to(tl.float32)
        x = gate.to(tl.float32)
        e = 1.0 + tl.exp(-x)
        sig = 1.0 / e
        act = (x / e).to(gate.dtype).to(tl.float32)  # as the forward kernel rounds it
        # rounded where torch's backward of `silu(gate) * up` rounds: each product to the dtype
        d_act = (g * up.to(tl.float32)).to(gate.dtype).to(tl.float32)
        d_gate = d_act * sig * (1.0 + x * (1.0 - sig))
        tl.store(dy + row * dy_row + at, d_gate.to(gate.dtype), mask=inside)
        tl.store(dy + row * dy_row + width + at, (g * act).to(gate.dtype), mask=inside)


def decode_attention(
    q: torch.Tensor,
    cache: torch.Tensor,
    real: torch.Tensor,
    column: torch.Tensor,
    scale: float,
    columns: int = COLUMNS,
) -> torch.Tensor:
    """q: one token's turned queries [rows, heads, d]; cache: [2, rows, kv, width, d]; real: [rows,
    width] bool, the key columns holding tokens; column: [1], the last column to read. Returns
    softmax(q k^T * scale) v over the columns <= column that are real, [rows, heads, d], each query
    head attending to the key/value head of its group (heads // kv consecutive heads). `columns`:
    key columns a program reads at a time (a power of two, at least 16)."""
    rows, heads, d = q.shape
    kv = cache.shape[2]
    keys, values = cache[0], cache[1]
    q = q.contiguous()
    out = torch.empty_like(q)
    assert keys.stride(3) == 1 and real.stride(1) == 1 and d & (d - 1) == 0
    group = heads // kv
    attention_kernel[(rows, kv)](
        q, keys, values, real, column, out, float(scale),
        group, q.stride(0), keys.stride(0), keys.stride(1), keys.stride(2), real.stride(0),
        G=max(16, triton.next_power_of_2(group)), D=d, N=columns,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  # float32 in full, as torch's
    )  # fmt: skip
    return out


def names_silu(config: object) -> bool:
    """Whether a model's config names SiLU as its MLP's activation: its layers' `act_fn` is then
    transformers' own SiLU module, not `torch.nn.SiLU` (an isinstance test once missed it)."""
    return getattr(config, "hidden_act", None) in ("silu", "swish")


def fused_silu(config: object, weight: torch.Tensor) -> bool:
    """Whether a model's gated activation runs as this module's kernels (`silu_mul`, `GatedSilu`):
    its config names SiLU and its weights are where Triton runs (the decoder's and the update's
    one test)."""
    return names_silu(config) and usable(weight)


def silu_mul(y: torch.Tensor) -> torch.Tensor:
    """y: [rows, 2 f], the fused gate/up projection; returns silu(gate) * up, [rows, f]."""
    rows, both = y.shape
    width = both // 2
    assert y.stride(1) == 1
    out = torch.empty((rows, width), dtype=y.dtype, device=y.device)
    silu_mul_kernel[(rows, triton.cdiv(width, WIDTH))](
        y, out, width, y.stride(0), out.stride(0), BLOCK=WIDTH
    )
    return out


class GatedSilu(torch.autograd.Function):
    """`silu_mul` with its backward, for the update (`written_update`): the gradient of both
    halves written by one kernel into the fused projection's layout. Torch's form takes two
    elementwise kernels forward, and backward two products, the activation's backward and the
    concatenation of the halves' gradients, each over [tokens, f] (issue 36)."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(y)
        return silu_mul(y)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        grad = grad.contiguous()
        rows, both = y.shape
        width = both // 2
        dy = torch.empty_like(y)
        silu_mul_backward_kernel[(rows, triton.cdiv(width, WIDTH))](
            y, grad, dy, width, y.stride(0), grad.stride(0), dy.stride(0), BLOCK=WIDTH
        )
        return dy
