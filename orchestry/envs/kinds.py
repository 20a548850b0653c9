"""What an environment's module hands the registry: `KIND = EnvKind(...)` (envs/<name>/kind.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from orchestry.envs.base import Env, Roles
from orchestry.envs.options import EnvOptions


class TaskSets(Protocol):
    """An environment's tasks: the sets `prepare.sets` may name, and their rows in the splits."""

    SETS: Sequence[str]

    def load_set(self, name: str) -> list[Any]: ...

    def to_dict(self, task: Any) -> dict[str, Any]: ...

    def task_from_dict(self, row: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class EnvKind:
    """One environment: how to build it and read its tasks."""

    name: str
    build: Callable[[Roles, EnvOptions], Env]
    """The environment for these roles and options (an Env class taking them will do)."""
    tasks: TaskSets
    roles: tuple[str, ...]
    """The agents when `model.agents` is left at the default (the code task's aux, main)."""
    code_problems: bool = False
    """Its tasks are the code problems: `prepare` derives helper unit tests in the sandbox."""
