"""Stage `evaluate`: the MAGRPO-trained team (adapters from `train`) on the test split, same protocol."""

from __future__ import annotations

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


def run(params: Params) -> None:
    problems = read_tasks(params, "test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    if not paths.ADAPTERS.is_dir():
        raise FileNotFoundError(
            f"{paths.ADAPTERS} is missing; run the train stage first (dvc repro train)"
        )
    seed_everything(params.seed)
    policy = make_policy(params)
    policy.load_adapters(paths.ADAPTERS)
    e = params.evaluate
    rows = team(
        policy,
        make_env(params, training=False),
        problems,
        e.n_samples,
        sampling_spec(params),
        "magrpo",
    )
    write_method("magrpo", rows, e.ks, e.bootstrap, params.seed)
