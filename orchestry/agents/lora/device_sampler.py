"""Sampling on the device without a host sync, so it can run inside a CUDA graph.

`HeadSampler` (head_sampler.py, the CPU path) looks at the head of the distribution and falls back to
a full sort when the head holds too little mass, a decision taken on the host. `draw` takes none: it
finds the top-p nucleus's smallest probability by bisection over the probabilities' bit patterns
(`nucleus_floor`, a fixed number of reductions), keeps the tokens at or above it and picks one by
inverse CDF, in vocabulary order, from a uniform given per row (drawn beforehand, e.g. once for all
steps of a call). Sorting the whole vocabulary for every row and token did the same and took ~0.30 s
of a 1.8 s generation at the 3B shape (a radix sort of 49k values per row, then two cumsums; issue 36).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

NUCLEUS_STEPS = 30
"""Bisection steps of `nucleus_floor`: a probability is at most 1.0, whose float32 bit pattern
(0x3F800000) is below 2**30, so 30 halvings of [0, its bits] leave one value."""


def nucleus_floor(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`torch_nucleus_floor`, on a GPU as one Triton kernel (`triton_nucleus_floor`) where Triton
    is installed: the torch form's ~5 kernels a bisection step, each over the whole [rows, vocab]
    tensor, cost more than the sort they replaced."""
    kernel = triton_floor_kernel() if probs.is_cuda else None
    if kernel is None:
        return torch_nucleus_floor(probs, top_p)
    return triton_nucleus_floor(kernel, probs, top_p)


def torch_nucleus_floor(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Per row [rows, 1] the largest probability v such that the tokens of probability >= v hold at
    least `top_p` of the mass: the least probable token transformers' top-p rule keeps (it keeps a
    token while the mass ranked above it is < top_p). Keeping every token >= v keeps that set, and
    besides it only tokens tied with v. Non-negative float32 values order as their bit patterns do,
    so the bisection runs over the integers and ends on the exact value."""
    bits = probs.view(torch.int32)
    low = torch.zeros((probs.shape[0], 1), dtype=torch.int32, device=probs.device)
    high = bits.amax(-1, keepdim=True) + 1  # mass(>= low) >= top_p > mass(>= high) throughout
    for _ in range(NUCLEUS_STEPS):
        mid = low + (high - low) // 2
        enough = torch.where(bits >= mid, probs, 0.0).sum(-1, keepdim=True) >= top_p
        low = torch.where(enough, mid, low)
        high = torch.where(enough, high, mid)
    return low.view(torch.float32)


FLOOR_BLOCK = 2048
"""Vocabulary entries a Triton program reads at a time (one program per row)."""


def triton_nucleus_floor(kernel: Any, probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`torch_nucleus_floor` by one program per row, each bisection step one pass over its row
    (kept in the GPU's cache), the mass summed in the kernel's own order."""
    probs = probs.contiguous()
    out = torch.empty(probs.shape[0], dtype=torch.int32, device=probs.device)
    kernel[(probs.shape[0],)](
        probs, out, probs.shape[1], float(top_p), BLOCK=FLOOR_BLOCK, STEPS=NUCLEUS_STEPS
    )
    return out.view(torch.float32)[:, None]


@functools.cache
def triton_floor_kernel() -> Any:
    """The Triton kernel of `triton_nucleus_floor`, or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def floor_kernel(probs, out, vocab, top_p, BLOCK: tl.constexpr, STEPS: tl.constexpr):
        row = probs + tl.program_id(0).to(tl.int64) * vocab
        most = tl.zeros([BLOCK], dtype=tl.int32)
        for start in range(0, vocab, BLOCK):
            at = start + tl.arange(0, BLOCK)
            p = tl.load(row + at, mask=at < vocab, other=0.0)
            most = tl.maximum(most, p.to(tl.int32, bitcast=True))
        high = tl.max(most, axis=0) + 1
        low = high * 0
        for _ in range(STEPS):
            mid = low + (high - low) // 2
            mass = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, vocab, BLOCK):
                at = start + tl.arange(0, BLOCK)
                p = tl.load(row + at, mask=at < vocab, other=0.0)
                mass += tl.where(p.to(tl.int32, bitcast=True) >= mid, p, 0.0)
            enough = tl.sum(mass, axis=0) >= top_p
            low = tl.where(enough, mid, low)
            high = tl.where(enough, high, mid)
        tl.store(out + tl.program_id(0), low)

    return floor_kernel


def draw(
    logits: torch.Tensor, uniform: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """One token per row by inverse CDF: `uniform[i]` in [0, 1) picks from row i's distribution.

    transformers' rule: temperature, then the top k renormalised, then top p keeping a token while
    the mass ranked above it is < top_p (tokens tied with the last one kept are kept too, here and
    at the k-th). No host sync, so it runs inside a CUDA graph.
    """
    scaled = logits.float() / temperature
    if top_k and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    probs = scaled.softmax(-1)
    if top_p < 1.0:
        probs = probs * (probs >= nucleus_floor(probs, top_p))
    total = probs.cumsum(-1)
    pick = (total <= uniform[:, None] * total[:, -1:]).sum(-1)
    return pick.clamp_(max=probs.shape[-1] - 1)
