"""A process's share of a GPU it shares with others: its allocator's cap, the plans' budget.

Six stages of gpu.yaml started together on one H200 ran out of its 140 GB: each planned its update
and sized its decode batches from the memory free when it looked, so the first ones took 26-43 GB
apiece and the last found none (issue 56). When several stages share a card the experiment runner
sets `SHARE_VARIABLE` to the fraction of the card each stage may hold (`--jobs N`: 0.8 / N, the
rest left to each process's CUDA context and kernels, which no allocator counts). Here that
fraction caps the caching allocator (`torch.cuda.set_per_process_memory_fraction`: past it an
allocation fails in this process, never in a neighbour), the update's memory plan reads it as the
memory it has, and the decoder splits a call into row chunks and drops older decoders so that its
caches fit. Unset, a process plans from the memory free on the card, as it always did.

It sits beside the CUDA engine, not in it, so that the runner can read `share_for_jobs` without
loading the engine; only the engine (and the runner) import it.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)

SHARE_VARIABLE = "ORCHESTRY_GPU_SHARE"
"""The fraction (0, 1] of the card's memory this process may hold; unset: the whole card."""
CARD_FOR_STAGES = 0.8
"""The part of a shared card the stages' allocators split between them (`share_for_jobs`)."""
DECODE_HEADROOM = 0.85
"""Of what the share leaves beside this process's other tensors, the part planned for decoding
(the allocator's fragmentation and the step's temporaries take the rest)."""


ALLOCATOR = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
"""Set beside a share: segments that grow in place, so the freed blocks of one decode chunk's
shape serve the next (a shared stage ran out of its share with 5.4 GiB reserved but unallocated)."""


def share_for_jobs(jobs: int) -> float:
    """Each stage's fraction of the card when `jobs` stages share it."""
    return CARD_FOR_STAGES / max(1, jobs)


def share() -> float | None:
    """This process's fraction of the card from `SHARE_VARIABLE`, or None when unset. A value that
    is no number in (0, 1] is an error naming the variable."""
    text = os.environ.get(SHARE_VARIABLE, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{SHARE_VARIABLE} must be a fraction in (0, 1], got {text!r}")
    return value


def share_bytes(device: int | torch.device | None = None) -> int | None:
    """The bytes of the card this process may hold, or None when it has the whole card."""
    fraction = share()
    if fraction is None or not torch.cuda.is_available():
        return None
    return int(fraction * torch.cuda.get_device_properties(device or 0).total_memory)


def claim() -> None:
    """Cap this process's caching allocator at its share on every visible card (once a share is
    set): an allocation past it raises OutOfMemoryError here instead of starving a neighbour."""
    fraction = share()
    if fraction is None or not torch.cuda.is_available():
        return
    for index in range(torch.cuda.device_count()):
        torch.cuda.set_per_process_memory_fraction(fraction, index)
    log.info(
        "GPU share %.3f of the card: at most %.1f GiB for this process",
        fraction,
        fraction * torch.cuda.get_device_properties(0).total_memory / 2**30,
    )


def planned_free(free_bytes: int) -> int:
    """What the update's memory plan may count as free: `free_bytes`, at most the share."""
    cap = share_bytes()
    return free_bytes if cap is None else min(free_bytes, cap)


def decode_room(device: torch.device, kept_bytes: int) -> int | None:
    """Bytes a new decoder may take: the share, less what this process holds beside the decoders
    it keeps (`kept_bytes`, which it may drop), times `DECODE_HEADROOM`; None without a share."""
    cap = share_bytes(device)
    if cap is None:
        return None
    others = max(0, torch.cuda.memory_allocated(device) - kept_bytes)
    return max(0, int((cap - others) * DECODE_HEADROOM))
