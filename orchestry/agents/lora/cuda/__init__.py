"""The CUDA engine: decoding as a CUDA graph (graph_decode), the update's written-out forward and
its recorded passes (written_update, graph_update), their written-out layers (fused), sampling on
the device (device_sampler), the Triton kernels (triton_*) and the GPU's memory plan (memory_plan).

Reached from the CPU path only through `orchestry.agents.lora.engine.cuda_engine`, which imports
this package when a GPU (or an engine path asked for by name) needs it. The names below are what
the CPU side calls; importing them here puts every engine file in this package's import closure.
"""

from __future__ import annotations

from orchestry.agents.lora.cuda.graph_decode import DecoderCache, decode_shape, supports
from orchestry.agents.lora.cuda.graph_update import GraphUpdate
from orchestry.agents.lora.cuda.memory_plan import PROMPT_TOKENS_ESTIMATE, model_size, plan_memory
from orchestry.agents.lora.cuda.written_update import supports_written

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
