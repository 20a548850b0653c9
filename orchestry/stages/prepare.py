"""Stage `prepare`: the train and test problem splits from the configured problem sets."""

from __future__ import annotations

from pathlib import Path

from orchestry import io
from orchestry.envs.code.problems import (
    Problem,
    load_humaneval,
    load_problem_dir,
    problem_from_dict,
    problem_to_dict,
    split_problems,
)
from orchestry.params import Params

OUT_DIR = Path("data/prepared")
COOP_DIRS = {"coop": Path("data/coop"), "coop3": Path("data/coop3")}


def load_set(name: str) -> list[Problem]:
    if name == "humaneval":
        return load_humaneval()
    return load_problem_dir(COOP_DIRS[name])


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
    io.write_jsonl(OUT_DIR / "train.jsonl", [problem_to_dict(p) for p in train])
    io.write_jsonl(OUT_DIR / "test.jsonl", [problem_to_dict(p) for p in test])
    io.write_json(OUT_DIR / "summary.json", {"seed": params.seed, "sets": summary})


def read_split(name: str) -> list[Problem]:
    """Load a prepared split (`train` or `test`)."""
    path = OUT_DIR / f"{name}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; run the prepare stage first (dvc repro prepare)"
        )
    return [problem_from_dict(d) for d in io.read_jsonl(path)]
