"""The environments by name: `env.name` picks one here, and its module is imported only then.

An environment is its folder under `envs/`, a `kind.py` there whose `KIND` is its `EnvKind` (its
builder, task sets and default roles), and one entry in `envs/catalog.py` naming that module (the
data params validation reads). Importing this module imports no environment, so a stage's code
is the environment it runs, not all four. `register` adds one at run time (a test's toy env).
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from orchestry.envs.catalog import CATALOG, EnvEntry, env_entry
from orchestry.envs.kinds import EnvKind, TaskSets

__all__ = ["ENVIRONMENTS", "EnvKind", "TaskSets", "env_kind", "register"]

ENVIRONMENTS: dict[str, EnvKind] = {}
"""The environments loaded so far (or registered at run time), by name."""


def register(kind: EnvKind) -> EnvKind:
    """Add an environment under its name, to the catalogue too (a name taken is an error)."""
    taken = CATALOG.get(kind.name)
    if taken is not None and (taken.module is not None or ENVIRONMENTS.get(kind.name) != kind):
        raise ValueError(f"environment {kind.name!r} is registered already")
    ENVIRONMENTS[kind.name] = kind
    CATALOG[kind.name] = EnvEntry(None, tuple(kind.tasks.SETS), kind.roles, kind.code_problems)
    return kind


def env_kind(name: str) -> EnvKind:
    """The environment `name`, its module imported now; the error lists the known ones."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    entry = env_entry(name)
    if entry.module is None:  # registered at run time, then dropped
        raise KeyError(f"environment {name!r} has no module (envs/catalog.py)")
    kind = importlib.import_module(entry.module).KIND
    if (kind.name, tuple(kind.tasks.SETS), kind.roles) != (name, entry.sets, entry.roles):
        raise ValueError(
            f"{entry.module}.KIND disagrees with envs/catalog.py's entry {name!r}: "
            f"{replace(entry, module=None)} vs name {kind.name}, sets {tuple(kind.tasks.SETS)}, "
            f"roles {kind.roles}"
        )
    ENVIRONMENTS[name] = kind
    return kind
