"""Sampling on the device without a host sync, so it can run inside a CUDA graph.

`HeadSampler` (head_sampler.py, the CPU path) looks at the head of the distribution and falls back to
a full sort when the head holds too little mass, a decision taken on the host. `draw` takes none: it
finds the top-p nucleus's smallest probability by bisection over the probabilities' bit patterns
(`nucleus_floor`, a fixed number of reductions), keeps the tokens at or above it and picks one by
inverse CDF, in vocabulary order, from a uniform given per row (drawn beforehand, e.g. once for all
steps of a call). Sorting the whole vocabulary for every row and token did the same and took ~0.30 s
of a 1.8 s generation at the 3B shape (a sort of 151,936 values per row, then two cumsums; issue 36).
On a GPU with Triton the softmax (without top-k), the floor and the pick are Triton kernels over
rows x vocabulary chunks (triton_sampler.py); this file's torch form is the CPU's and the reference
the tests hold them to.
"""

from __future__ import annotations

import math

import torch

import orchestry.agents.lora.cuda.triton_sampler as triton_sampler
from orchestry.agents.lora.cuda.triton_support import usable

NUCLEUS_STEPS = 30
"""Bisection steps of `nucleus_floor`: a probability is at most 1.0, whose float32 bit pattern
(0x3F800000) is below 2**30, so 30 halvings of [0, its bits] leave one value."""


def nucleus_floor(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`torch_nucleus_floor`, on a GPU by Triton kernels (triton_sampler.py) where Triton is
    installed: the torch form's ~5 kernels a bisection step, each over the whole [rows, vocab]
    tensor, cost more than the sort they replaced."""
    if usable(probs):
        return triton_sampler.nucleus_floor(probs, top_p)
    return torch_nucleus_floor(probs, top_p)


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


def draw(
    logits: torch.Tensor, uniform: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """One token per row by inverse CDF: `uniform[i]` in [0, 1) picks from row i's distribution.

    transformers' rule: temperature, then the top k renormalised, then top p keeping a token while
    the mass ranked above it is < top_p (tokens tied with the last one kept are kept too, here and
    at the k-th). No host sync, so it runs inside a CUDA graph. `logits` of any float dtype: on a
    GPU without top-k the kernels read the head's bfloat16 as it is (`triton_sampler.sample`: the
    float32 copy, the division and torch's softmax were ~210 us a token at the 3B shape in the
    profile of results/bench/paper_scale.json at ed292b5).
    """
    if usable(logits) and not (top_k and top_k < logits.shape[-1]):
        return triton_sampler.sample(logits, uniform, temperature, top_p)
    scaled = logits.float() / temperature
    if top_k and top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    probs = scaled.softmax(-1)
    if usable(probs):
        return triton_sampler.pick(probs, uniform, top_p)
    if top_p < 1.0:
        probs = probs * (probs >= nucleus_floor(probs, top_p))
    total = probs.cumsum(-1)
    pick = (total <= uniform[:, None] * total[:, -1:]).sum(-1)
    return pick.clamp_(max=probs.shape[-1] - 1)
