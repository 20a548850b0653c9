"""The decode step's RMSNorm and its LoRA terms' expand-and-add as Triton kernels.

Profiled at the 3B shape (issue 36; 36 layers x 127 decode steps of 128 rows, an H200; the profile
of results/bench/paper_scale.json at ed292b5), a layer's
LoRA terms on q/k/v and o cost more than its frozen projections: per projection a shrink GEMM
(`x A^T`, ~5.3 us: cuBLAS tiles a 96-column output thinly), the 0/1 mask as an elementwise product
(~1.35 us) and the expand GEMM adding into the output (~4.7 us), ~23 us a layer, ~0.10 s of a
0.77 s generation; torch's RMSNorm took ~3.9 us, twice a layer (~36 ms). In the decoder the
shrink now rides in the frozen GEMM (`fused.Fused`: the adapters' A stacked under the frozen
weight, one GEMM writes [x W^T | x A^T]) and `lora_expand` does the rest in one kernel: it reads
the rank columns of that output, masks them (a row keeps only its own adapter's block), multiplies
by the stacked B on tensor cores, adds the frozen part (and the residual) and writes the result.
In results/bench/decode_kernels.json (commit 447f04e, 128 rows, bfloat16) the q/k/v projection
with its LoRA takes 9.0 us against torch's form's 15.3, o's 8.4 against 14.7, RMSNorm 1.8 against
3.2.

Rounding: the frozen part arrives rounded to the dtype, as torch's `linear` leaves it; the sum of
it, the residual and the LoRA term is taken in float32 and rounded once. Torch's form rounds
`residual + x W^T` first (one GEMM with beta = 1), then adds the LoRA term (another): where there
is a residual the two differ by a rounding of the same size.
"""

from __future__ import annotations

import torch

from orchestry.agents.lora.cuda.triton_support import tl, triton

ROWS = 64
"""Rows a `lora_expand` program covers."""
COLS = 64
"""Output columns a `lora_expand` program covers."""


if triton is not None:

    @triton.jit
    def lora_expand_kernel(
        y, mask, b, residual, out, rows, n, total,
        y_row, mask_row, b_row, res_row, out_row,
        HAS_RESIDUAL: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, KP: tl.constexpr,
        PRECISION: tl.constexpr,
    ):  # fmt: skip
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = (pm * BM + tl.arange(0, BM)).to(tl.int64)
        rn = pn * BN + tl.arange(0, BN)
        k = tl.arange(0, KP)
        in_rows, in_cols, in_ranks = rm < rows, rn < n, k < total
        rank_at = in_rows[:, None] & in_ranks[None, :]
        low = tl.load(y + rm[:, None] * y_row + n + k[None, :], mask=rank_at, other=0.0)
        keep = tl.load(mask + rm[:, None] * mask_row + k[None, :], mask=rank_at, other=0.0)
        low = low * keep  # 0 or 1: exact in any dtype
        up = tl.load(
            b + rn[:, None] * b_row + k[None, :],
            mask=in_cols[:, None] & in_ranks[None, :],
            other=0.0,
        )
        term = tl.dot(low, tl.trans(up), input_precision=PRECISION)
        at = in_rows[:, None] & in_cols[None, :]
        base = tl.load(y + rm[:, None] * y_row + rn[None, :], mask=at, other=0.0).to(tl.float32)
        if HAS_RESIDUAL:
            res = tl.load(residual + rm[:, None] * res_row + rn[None, :], mask=at, other=0.0)
            base += res.to(tl.float32)
        result = base + term
        tl.store(
            out + rm[:, None] * out_row + rn[None, :], result.to(out.dtype.element_ty), mask=at
        )

    @triton.jit
    def rms_norm_kernel(x, weight, out, width, x_row, out_row, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        at = tl.arange(0, BLOCK)
        inside = at < width
        v = tl.load(x + row * x_row + at, mask=inside, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.sum(v * v, axis=0) / width + eps)
        g = tl.load(weight + at, mask=inside, other=0.0).to(tl.float32)
        tl.store(out + row * out_row + at, (v * scale * g).to(out.dtype.element_ty), mask=inside)


def lora_expand(
    y: torch.Tensor,
    n: int,
    mask: torch.Tensor,
    b: torch.Tensor,
    residual: torch.Tensor | None = None,
    rows_per_program: int = ROWS,
    cols_per_program: int = COLS,
) -> torch.Tensor:
    """y: [rows, n + ranks], the frozen projection's output beside its LoRA shrink `x A^T`; mask:
    [rows, ranks] 0/1, the rank columns of each row's adapter; b: [n, ranks], the stacked B (its
    scaling folded in). Returns y[:, :n] + (y[:, n:] * mask) b^T (+ residual), [rows, n]: written
    into `residual` itself where one is given (each entry is read, then written, by one program),
    else into a new tensor."""
    rows, ranks = mask.shape
    assert y.shape == (rows, n + ranks) and b.shape == (n, ranks)
    assert y.stride(1) == 1 and mask.stride(1) == 1 and b.stride(1) == 1
    out = (
        residual if residual is not None else torch.empty((rows, n), dtype=y.dtype, device=y.device)
    )
    assert out.stride(1) == 1
    grid = (triton.cdiv(rows, rows_per_program), triton.cdiv(n, cols_per_program))
    lora_expand_kernel[grid](
        y, mask, b, out, out, rows, n, ranks,
        y.stride(0), mask.stride(0), b.stride(0), out.stride(0), out.stride(0),
        HAS_RESIDUAL=residual is not None, BM=rows_per_program, BN=cols_per_program,
        KP=max(16, triton.next_power_of_2(ranks)),
        PRECISION="ieee" if y.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """torch.nn.functional.rms_norm over the last dimension of x [rows, width]: in float32,
    x * rsqrt(mean(x^2) + eps) * weight, rounded once to x's dtype (the sum's order may differ
    from torch's)."""
    rows, width = x.shape
    assert x.stride(1) == 1
    out = torch.empty_like(x)
    block = triton.next_power_of_2(width)
    rms_norm_kernel[(rows,)](
        x, weight, out, width, x.stride(0), out.stride(0), float(eps),
        BLOCK=block, num_warps=8 if block >= 2048 else 4,
    )  # fmt: skip
    return out
