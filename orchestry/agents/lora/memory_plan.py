"""The update settings that `auto` resolves to: what a plan holds, and the CPU's fixed choices.

On a GPU the plan is sized from the model, the rows and the device's memory by the CUDA engine
(`cuda/memory_plan.py`, reached through `engine.cuda_engine`); a CPU run never imports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryPlan:
    microbatch: int
    gradient_checkpointing: bool
    record_update_graphs: bool


CPU_PLAN = MemoryPlan(microbatch=8, gradient_checkpointing=True, record_update_graphs=False)
"""The CPU's choices, as before this plan existed (memory on a CPU; no graphs there)."""

MIXED_TOKENS_PER_ROW = 512
"""The mixed update's passes hold at most microbatch x this many padded tokens (each distinct prompt
once, padded to the longest, plus every completion, padded to the longest), so a pass of long
prompts (multi-turn histories) holds no more activations than a pass of short ones
(`algos/pg_update.py` cuts its passes so; the GPU's memory plan sizes them so)."""
