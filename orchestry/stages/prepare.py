"""Stage `prepare`: the train and test problem splits from the configured problem sets.

Each helper with a reference gets unit tests derived from a recorded run of the reference program in
the sandbox (envs/code/unit_tests.py), so "is aux right on its own" can be measured later.
"""

from __future__ import annotations

from orchestry import io, paths
from orchestry.envs.code.humaneval import load_humaneval
from orchestry.envs.code.problems import (
    Problem,
    load_problem_dir,
    problem_to_dict,
    split_problems,
)
from orchestry.envs.code.sandbox import SandboxLimits
from orchestry.envs.code.unit_tests import with_helper_tests
from orchestry.params import Params


def load_set(name: str) -> list[Problem]:
    if name == "humaneval":
        return load_humaneval()
    return load_problem_dir(paths.PROBLEM_DIRS[name])


def run(params: Params) -> None:
    train: list[Problem] = []
    test: list[Problem] = []
    summary: dict[str, dict[str, int]] = {}
    for name, split in sorted(params.prepare.sets.items()):
        if split.n_train + split.n_test == 0:
            continue
        problems = load_set(name)
        tr, te = split_problems(problems, split.n_train, split.n_test, params.seed)
        train += tr
        test += te
        summary[name] = {"available": len(problems), "train": len(tr), "test": len(te)}
    if not train and not test:
        raise ValueError("prepare.sets selects no problems; give some set n_train or n_test > 0")
    # the sandbox section as limits (stages/from_params.py would pull the model stack into prepare)
    limits = SandboxLimits(**params.sandbox.model_dump(exclude={"workers"}))
    workers = params.sandbox.worker_count()
    train = with_helper_tests(train, limits, workers)
    test = with_helper_tests(test, limits, workers)
    io.write_jsonl(paths.split("train"), [problem_to_dict(p) for p in train])
    io.write_jsonl(paths.split("test"), [problem_to_dict(p) for p in test])
    io.write_json(paths.PREPARED_SUMMARY, {"seed": params.seed, "sets": summary})
