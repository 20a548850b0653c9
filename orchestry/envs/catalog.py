"""The environments as data: what `env.name` may be, each one's task sets, default roles and module.

Params validation, the deps command and `prepare` read this page; none of them imports an
environment to learn its name. The environment itself (its class, builder and task loader) is the
`KIND` of the module named here, imported only when `env.name` selects it (`envs/registry.py`).
A test checks every entry against its module (tests/envs/test_registry.py).
"""

from __future__ import annotations

from dataclasses import dataclass

CODE_SETS = (
    "coop",
    "coop3",
    "humaneval",
    "humaneval_paper",
    "gen",
    "gen_unseen",
    "gen_train",
    "gen_compose",
    "gen_unseen_balanced",
)


@dataclass(frozen=True)
class EnvEntry:
    """One environment, as params validation sees it."""

    module: str | None
    """Dotted path of the module whose `KIND` is the environment (None: registered at run time)."""
    sets: tuple[str, ...]
    """The task sets `prepare.sets` may name for it."""
    roles: tuple[str, ...]
    """The agents when `model.agents` is left at the default (the code task's aux, main)."""
    code_problems: bool = False
    """Its tasks are the code problems: `prepare` derives helper unit tests in the sandbox."""


CATALOG: dict[str, EnvEntry] = {
    "code": EnvEntry("orchestry.envs.code.kind", CODE_SETS, ("aux", "main"), code_problems=True),
    "code_review": EnvEntry(
        "orchestry.envs.code_review.kind",
        CODE_SETS,
        ("writer", "reviewer", "refactorer"),
        code_problems=True,
    ),
    "story": EnvEntry("orchestry.envs.story.kind", ("story",), ("writer", "editor", "narrator")),
    "writing": EnvEntry("orchestry.envs.writing.kind", ("tldr", "arxiv"), ("first", "second")),
}

TOOL_NAMES = ("python", "calculator", "examples")
"""The tools `env.tools.names` may name (envs/tools/registry.py describes and runs them)."""


def env_entry(name: str) -> EnvEntry:
    """The catalogue's entry for `name`; KeyError listing the known names."""
    if name not in CATALOG:
        raise KeyError(
            f"unknown environment {name!r}; registered: {', '.join(sorted(CATALOG))} "
            "(envs/catalog.py)"
        )
    return CATALOG[name]


def all_sets() -> set[str]:
    """Every task set some environment reads."""
    return {s for entry in CATALOG.values() for s in entry.sets}
