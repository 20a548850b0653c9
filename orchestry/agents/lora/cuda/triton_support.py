"""Triton, where it is installed (the GPU wheels of torch bring it; the CPU wheel does not), for
the decode step's kernels (triton_rotary, triton_decode, triton_sampler), and the one test of
whether they run on a tensor."""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None


def usable(x: torch.Tensor) -> bool:
    """Whether the Triton kernels can run on `x`: it is on a GPU and Triton is installed."""
    return x.is_cuda and triton is not None
