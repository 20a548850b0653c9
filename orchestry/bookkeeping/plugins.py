"""The registries that import a plug-in by its dotted name, and every plug-in they can import.

A registry keeps its plug-ins' module paths as strings (so a stage imports only the one its params
select, and `code_deps`, which follows import statements, does not list the others). This page
names each registry module and the constant holding its paths; `fingerprint.plugins` picks the ones
a params file selects, `every_plugin` lists them all (what the experiment runner can reach).
"""

from __future__ import annotations

from orchestry.bookkeeping import code_deps
from orchestry.envs.catalog import CATALOG

ENGINE_REGISTRY = "orchestry.agents.lora.engine"  # ENGINES: device -> the engine's package
CLAUDE_REGISTRY = "orchestry.stages.from_params"  # CLAUDE_BACKEND
PIPELINE_REGISTRY = "orchestry.stages.train"  # PIPELINE: train.parallel pipeline's module
ENV_REGISTRY = "orchestry.envs.registry"  # envs/catalog.py: env.name -> its module


def every_plugin() -> list[tuple[str, str]]:
    """(registry, plug-in) for every plug-in any params can select: the code an experiment runner
    (which may run any params) can reach."""
    chosen = [(ENV_REGISTRY, e.module) for e in CATALOG.values() if e.module is not None]
    engines = code_deps.constant(ENGINE_REGISTRY, "ENGINES")
    chosen += [(ENGINE_REGISTRY, m) for m in engines.values()]  # type: ignore[union-attr]
    chosen.append((CLAUDE_REGISTRY, str(code_deps.constant(CLAUDE_REGISTRY, "CLAUDE_BACKEND"))))
    chosen.append((PIPELINE_REGISTRY, str(code_deps.constant(PIPELINE_REGISTRY, "PIPELINE"))))
    return chosen
