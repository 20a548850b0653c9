"""Stage `evaluate`: the MAGRPO-trained team (adapters from `train`) on the test split, same protocol.

With `evaluate.processes` > 1 the test problems are shared out over that many processes
(`stages/shards.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestry import paths
from orchestry.eval.protocols import team
from orchestry.eval.records import write_method
from orchestry.params import Params
from orchestry.stages.from_params import (
    make_env,
    make_policy,
    read_tasks,
    sampling_spec,
    seed_everything,
)
from orchestry.stages.shards import rows_in_shards


def evaluated_adapters(params: Params, single: bool) -> Path:
    """The adapters `evaluate` (the team) or `evaluate_single` (`single`) loads for
    `evaluate.adapters`: RL's, or the sft stage's warm start; an error naming the stage that
    writes them when they are missing."""
    warm = params.evaluate.adapters == "warm_start"
    if warm:
        adapters, stage = paths.warm_start(single), "sft"
    else:
        adapters = paths.SINGLE_ADAPTERS if single else paths.ADAPTERS
        stage = "train_single" if single else "train"
    if not adapters.is_dir():
        raise FileNotFoundError(
            f"{adapters} is missing; run the {stage} stage first (dvc repro {stage})"
        )
    return adapters


def run(params: Params) -> None:
    problems = read_tasks(params, "test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    adapters = evaluated_adapters(params, single=False)
    seed_everything(params.seed)
    e = params.evaluate

    def rows_of(tasks: Sequence[Any], rank: int) -> list[dict[str, Any]]:
        policy = make_policy(params)
        policy.load_adapters(adapters)
        policy.sample_stream = rank
        env = make_env(params, training=False)
        return team(policy, env, tasks, e.n_samples, sampling_spec(params), "magrpo")

    rows = rows_in_shards(params, ["evaluate"], problems, rows_of)
    if rows is not None:
        write_method("magrpo", rows, e.ks, e.bootstrap, params.seed)
