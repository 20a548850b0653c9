"""Stage `prepare`: the train and test splits of `env.name`'s task sets.

Code problems: each helper with a reference gets unit tests derived from a recorded run of the
reference program in the sandbox (envs/code/unit_tests.py), so "is aux right on its own" can be
measured later (the code_review workflow reads the same problems). Story themes and writing sources
are split as they are. Every set is split by the seeded shuffle (`split_problems`) except
`humaneval_paper`, whose split is the paper's, fixed by task index (envs/code/humaneval.py). The
generated sets (`gen`, `gen_unseen`: envs/code/generated) are made here, at their fixed seed.
"""

from __future__ import annotations

from typing import Any

from orchestry import io, paths
from orchestry.envs.code.humaneval import paper_split
from orchestry.envs.code.problems import Problem, problem_to_dict, split_problems
from orchestry.envs.code.sandbox import SandboxLimits
from orchestry.envs.code.unit_tests import with_helper_tests
from orchestry.envs.registry import env_kind
from orchestry.params import Params


def split_set(
    name: str, tasks: list[Any], n_train: int, n_test: int, seed: int
) -> tuple[list[Any], list[Any]]:
    """A set's (train, test): the seeded shuffle, or the paper's fixed split for humaneval_paper."""
    if name == "humaneval_paper":
        return paper_split(tasks, n_train, n_test)
    return split_problems(tasks, n_train, n_test, seed)


def run(params: Params) -> None:
    env = params.env.name
    kind = env_kind(env)
    train: list[Any] = []
    test: list[Any] = []
    summary: dict[str, dict[str, int]] = {}
    seed = params.seed if params.prepare.split_seed is None else params.prepare.split_seed
    for name, split in sorted(params.prepare.sets.items()):
        if split.n_train + split.n_test == 0 or name not in kind.tasks.SETS:
            continue
        tasks = kind.tasks.load_set(name)
        tr, te = split_set(name, tasks, split.n_train, split.n_test, seed)
        train += tr
        test += te
        summary[name] = {"available": len(tasks), "train": len(tr), "test": len(te)}
    if not train and not test:
        raise ValueError(
            f"prepare.sets selects no task of env.name {env}; give one of its sets "
            f"({', '.join(kind.tasks.SETS)}) n_train or n_test > 0"
        )
    if kind.code_problems:  # code and code_review: helper tests from the reference runs
        rows = _with_helper_tests(params, train, test)
    else:
        to_dict = kind.tasks.to_dict
        rows = [to_dict(t) for t in train], [to_dict(t) for t in test]
    io.write_jsonl(paths.split("train"), rows[0])
    io.write_jsonl(paths.split("test"), rows[1])
    info: dict[str, Any] = {"seed": seed, "sets": summary}
    if env != "code":  # the code task's summary keeps its earlier form
        info["env"] = env
    io.write_json(paths.PREPARED_SUMMARY, info)


def _with_helper_tests(
    params: Params, train: list[Problem], test: list[Problem]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # the sandbox section as limits (stages/from_params.py would pull the model stack into prepare)
    limits = SandboxLimits(**params.sandbox.model_dump(exclude={"workers"}))
    workers = params.sandbox.worker_count()
    train = with_helper_tests(train, limits, workers)
    test = with_helper_tests(test, limits, workers)
    return [problem_to_dict(p) for p in train], [problem_to_dict(p) for p in test]
