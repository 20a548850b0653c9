"""The one way from the CPU path to the CUDA engine (`cuda/`: graph decode and update, Triton).

The engine is named here by its dotted path, a string, and imported only when `cuda_engine` is
called: where the device is a GPU, or a caller picks an engine path by name (`generate`'s
path="graph", `TeamPolicy.update_path = "written"`; the tests run both on a CPU). No module of the
CPU path holds an import statement of `orchestry.agents.lora.cuda`, so a CPU run loads none of its
files, and the stages' code (`bookkeeping/code_deps.py`, which follows import statements, not
strings) does not list them.

What the CPU side calls of the engine (the names `cuda/__init__.py` exports): `supports(model)`,
`decode_shape(rows, sampling)` and `DecoderCache()` (graph decoding), `supports_written(model)` and
`GraphUpdate(record)` (the written-out update), `model_size`, `plan_memory` and
`PROMPT_TOKENS_ESTIMATE` (the GPU's memory plan).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import torch
from peft import PeftModel

ENGINES = {"cuda": "orchestry.agents.lora.cuda"}
"""Engine name -> its package, imported only by `cuda_engine`."""

RowLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(advantages, log-prob sums, token counts) -> each row's loss; hashable (`algos/magrpo.RowLoss`).
The update's per-row loss, handed through `TeamPolicy.mixed_backward` to the engine's update."""


def cuda_engine() -> ModuleType:
    """The CUDA engine's package (`orchestry.agents.lora.cuda`), imported on this first call."""
    return importlib.import_module(ENGINES["cuda"])


def written_applies(model: PeftModel, path: str | None) -> bool:
    """Whether the update takes the written-out path: `path` "written" where it applies, "peft"
    never, None (the default) on a GPU where it applies. A CPU run (path None) decides without the
    engine; where it may apply, the engine's `supports_written` says."""
    if path == "peft" or (path is None and next(model.parameters()).device.type != "cuda"):
        return False
    return cuda_engine().supports_written(model)
