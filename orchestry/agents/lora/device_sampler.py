"""Sampling on the device without a host sync, so it can run inside a CUDA graph.

`HeadSampler` (head_sampler.py, the CPU path) looks at the head of the distribution and falls back to
a full sort when the head holds too little mass, a decision taken on the host. On a GPU sorting the
whole vocabulary for every row costs little, so `draw` always does, and picks by inverse CDF from a
uniform given per row (drawn beforehand, e.g. once for all steps of a call).
"""

from __future__ import annotations

import math

import torch


def draw(
    logits: torch.Tensor,
    uniform: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    vocab_index: torch.Tensor,
) -> torch.Tensor:
    """One token per row by inverse CDF: `uniform[i]` in [0, 1) picks from row i's distribution.

    transformers' rule: temperature, then the top k renormalised, then top p keeping a token while
    the mass ranked above it is < top_p. No host sync, so it runs inside a CUDA graph.
    """
    values, index = (logits / temperature).sort(dim=-1, descending=True)
    if top_k:
        values = values.masked_fill(vocab_index >= top_k, -math.inf)
    probs = values.softmax(-1)
    if top_p < 1.0:
        keep = (probs.cumsum(-1) - probs) < top_p  # mass ranked above each token
        keep[:, 0] = True
        probs = probs * keep
    total = probs.cumsum(-1)
    pick = (total <= uniform[:, None] * total[:, -1:]).sum(-1, keepdim=True)
    return index.gather(-1, pick.clamp_(max=probs.shape[-1] - 1)).squeeze(-1)
