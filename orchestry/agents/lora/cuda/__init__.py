"""The CUDA engine: decoding as a CUDA graph (graph_decode), the update's written-out forward and
its recorded passes (written_update, graph_update), their written-out layers (fused), sampling on
the device (device_sampler), the Triton kernels (triton_*), the GPU's memory plan (memory_plan) and
a process's share of a card it shares with other stages (card_share).

Reached from the CPU path only through `orchestry.agents.lora.engine.cuda_engine`, which imports
this package when a GPU (or an engine path asked for by name) needs it. The names below are what
the CPU side calls; importing them here puts every engine file in this package's import closure.
Importing it caps this process's allocator at its share of the card, when one is set
(`card_share.claim`): every stage that can touch a GPU imports it before it allocates there.
"""

from __future__ import annotations

from orchestry.agents.lora import card_share
from orchestry.agents.lora.cuda import memory_plan
from orchestry.agents.lora.cuda.decoder_cache import DecoderCache
from orchestry.agents.lora.cuda.graph_decode import decode_shape, supports
from orchestry.agents.lora.cuda.graph_update import GraphUpdate
from orchestry.agents.lora.cuda.memory_plan import PROMPT_TOKENS_ESTIMATE, model_size
from orchestry.agents.lora.cuda.written_update import supports_written
from orchestry.agents.lora.memory_plan import MemoryPlan

card_share.claim()


def plan_memory(*args: object, free_bytes: int, **kwargs: object) -> MemoryPlan:
    """`memory_plan.plan_memory` with `free_bytes` at most this process's share of the card."""
    return memory_plan.plan_memory(*args, free_bytes=card_share.planned_free(free_bytes), **kwargs)


__all__ = [
    "PROMPT_TOKENS_ESTIMATE",
    "DecoderCache",
    "GraphUpdate",
    "decode_shape",
    "model_size",
    "plan_memory",
    "supports",
    "supports_written",
]
