"""The environments by name: `env.name` in params.yaml picks one here, and nowhere else.

An environment is its folder under `envs/` plus one `register(EnvKind(...))` line below: its class
(or a builder taking the roles and the `EnvOptions` the stages fill in), its task sets (a module or
object with `SETS`, `load_set(name)`, `to_dict(task)`, `task_from_dict(row)`) and the roles it
plays with when `model.agents` is left at the default. Params validation, `prepare`, and
`stages/from_params.py` (which builds the env and reads its prepared splits) all look it up here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from orchestry.envs.base import Env, Roles
from orchestry.envs.code import tasks as code_tasks
from orchestry.envs.code.env import CodeEnv
from orchestry.envs.code.reward import RewardWeights
from orchestry.envs.code_review.env import CodeReviewEnv
from orchestry.envs.code_review.reward import CodeReviewSettings
from orchestry.envs.options import EnvOptions
from orchestry.envs.story import tasks as story_tasks
from orchestry.envs.story.env import StoryEnv
from orchestry.envs.story.reward import StorySettings
from orchestry.envs.tools.protocol import ToolBudget
from orchestry.envs.tools.registry import ToolUse
from orchestry.envs.writing import tasks as writing_tasks
from orchestry.envs.writing.env import WritingEnv
from orchestry.envs.writing.reward import WritingSettings


class TaskSets(Protocol):
    """An environment's tasks: the sets `prepare.sets` may name, and their rows in the splits."""

    SETS: Sequence[str]

    def load_set(self, name: str) -> list[Any]: ...

    def to_dict(self, task: Any) -> dict[str, Any]: ...

    def task_from_dict(self, row: dict[str, Any]) -> Any: ...


@dataclass(frozen=True)
class EnvKind:
    """One registered environment."""

    name: str
    build: Callable[[Roles, EnvOptions], Env]
    """The environment for these roles and options (an Env class taking them will do)."""
    tasks: TaskSets
    roles: tuple[str, ...]
    """The agents when `model.agents` is left at the default (the code task's aux, main)."""
    code_problems: bool = False
    """Its tasks are the code problems: `prepare` derives helper unit tests in the sandbox."""


ENVIRONMENTS: dict[str, EnvKind] = {}


def register(kind: EnvKind) -> EnvKind:
    """Add an environment under its name (a name taken by another kind is an error)."""
    taken = ENVIRONMENTS.get(kind.name)
    if taken is not None and taken != kind:
        raise ValueError(f"environment {kind.name!r} is registered already")
    ENVIRONMENTS[kind.name] = kind
    return kind


def env_kind(name: str) -> EnvKind:
    """The environment registered as `name`; the error lists the registered ones."""
    if name not in ENVIRONMENTS:
        raise KeyError(
            f"unknown environment {name!r}; registered: {', '.join(sorted(ENVIRONMENTS))} "
            "(envs/registry.py)"
        )
    return ENVIRONMENTS[name]


def all_sets() -> set[str]:
    """Every task set some registered environment reads."""
    return {s for kind in ENVIRONMENTS.values() for s in kind.tasks.SETS}


def _code(roles: Roles, o: EnvOptions) -> CodeEnv:
    weights = RewardWeights(**o.reward)
    t = o.tools
    tool_use = (
        ToolUse(tuple(t["names"]), ToolBudget(t["max_calls"], t["max_result_chars"]), o.limits)
        if t["enabled"]
        else None
    )
    return CodeEnv(
        roles,
        weights,
        o.limits,
        o.workers,
        o.feedback,
        rename_lone_helper=o.rename_lone_helper,
        tool_use=tool_use,
    )


def _code_review(roles: Roles, o: EnvOptions) -> CodeReviewEnv:
    s = o.settings
    review = CodeReviewSettings(
        tests_weight=s["tests"],
        syntax_weight=s["syntax"],
        review_weight=s["review"],
        review_max_words=s["review_max_words"],
    )
    return CodeReviewEnv(roles, review, o.limits, o.workers)


def _story(roles: Roles, o: EnvOptions) -> StoryEnv:
    s = o.settings
    settings = StorySettings(
        quality_weight=s["quality"],
        collaboration_weight=s["collaboration"],
        efficiency_weight=s["efficiency"],
        turns_range=(s["turns_range"][0], s["turns_range"][1]),
        words_range=(s["words_range"][0], s["words_range"][1]),
    )
    return StoryEnv(roles, settings, story_tasks.load_roles(), judge=o.judge())


def _writing(roles: Roles, o: EnvOptions) -> WritingEnv:
    return WritingEnv(roles, WritingSettings(**o.settings))


register(EnvKind("code", _code, code_tasks, ("aux", "main"), code_problems=True))
register(
    EnvKind(
        "code_review",
        _code_review,
        code_tasks,
        ("writer", "reviewer", "refactorer"),
        code_problems=True,
    )
)
register(EnvKind("story", _story, story_tasks, story_tasks.DEFAULT_ROLES))
register(EnvKind("writing", _writing, writing_tasks, ("first", "second")))
