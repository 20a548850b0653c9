"""Stage `evaluate`: the MAGRPO-trained team (adapters from `train`) on the test split, same protocol.

With `evaluate.processes` > 1 the test problems are shared out over that many processes
(`stages/shards.py`)."""

from __future__ import annotations

from collections.abc import Sequence
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


def run(params: Params) -> None:
    problems = read_tasks(params, "test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    adapters = (
        paths.warm_start(single=False)
        if params.evaluate.adapters == "warm_start"
        else paths.ADAPTERS
    )
    if not adapters.is_dir():
        stage = "sft" if params.evaluate.adapters == "warm_start" else "train"
        raise FileNotFoundError(
            f"{adapters} is missing; run the {stage} stage first (dvc repro {stage})"
        )
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
