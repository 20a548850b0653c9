"""The code problems as task sets: what `prepare` splits and every other stage reads back (the
same interface as the text environments' `tasks.py`)."""

from __future__ import annotations

from typing import Any

from orchestry import paths
from orchestry.envs.code.generated import (
    COMPARISON_SETS,
    GEN_SETS,
    comparison_set,
    generated_set,
)
from orchestry.envs.code.humaneval import load_humaneval
from orchestry.envs.code.problems import (
    Problem,
    load_problem_dir,
    problem_from_dict,
    problem_to_dict,
)

SETS = ("coop", "coop3", "humaneval", "humaneval_paper", "gen", "gen_unseen", *COMPARISON_SETS)


def load_set(name: str) -> list[Problem]:
    if name in ("humaneval", "humaneval_paper"):
        return load_humaneval()
    if name in GEN_SETS:
        return generated_set(name)
    if name in COMPARISON_SETS:
        return comparison_set(name)
    return load_problem_dir(paths.PROBLEM_DIRS[name])


def to_dict(task: Problem) -> dict[str, Any]:
    return problem_to_dict(task)


def task_from_dict(row: dict[str, Any]) -> Problem:
    return problem_from_dict(row)
