"""Stage `baseline --name <single|naive_concat|sequential|discussion>`: one baseline on the test split.

Same base model and sampling as training (untrained adapters, i.e. the base model), unless
`evaluate.single_model` names another model for the single-model baseline or `evaluate.backend: claude`
runs the agents through the Anthropic API.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from orchestry import paths
from orchestry.agents.base import Generator
from orchestry.eval.protocols import discussion, sequential, single, team
from orchestry.eval.records import write_method
from orchestry.params import BASELINE_NAMES, Params
from orchestry.stages.from_params import (
    make_env,
    make_generator,
    read_tasks,
    sampling_spec,
    seed_everything,
)
from orchestry.stages.shards import rows_in_shards

log = logging.getLogger("orchestry.stages.baseline")


def run(params: Params, name: str) -> None:
    problems = read_tasks(params, "test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    if name not in BASELINE_NAMES:
        raise ValueError(f"unknown baseline {name!r}")
    seed_everything(params.seed)
    out_dir = paths.method_dir(name)
    n, sampling = params.evaluate.n_samples, sampling_spec(params)
    log.info("baseline %s: %d test problems x %d samples", name, len(problems), n)

    def rows_of(tasks: Sequence[Any], rank: int) -> list[dict[str, Any]]:
        env = make_env(params, training=False)
        if name == "single":
            model_name = params.evaluate.single_model or params.model.name
            p = params.model_copy(
                update={"model": params.model.model_copy(update={"name": model_name})}
            )
            gen = own_stream(make_generator(p, ["single"], out_dir), rank)
            return single(gen, env, tasks, "single", n, sampling)
        gen = own_stream(make_generator(params, list(env.roles.agents), out_dir), rank)
        if name == "naive_concat":
            return team(gen, env, tasks, n, sampling, "naive_concat")
        if name == "sequential":
            return sequential(gen, env, tasks, n, sampling)
        return discussion(gen, env, tasks, n, sampling)

    stage = ["baseline", "--name", name]
    rows = rows_in_shards(params, stage, problems, rows_of)
    if rows is not None:
        write_method(name, rows, params.evaluate.ks, params.evaluate.bootstrap, params.seed)


def own_stream(gen: Generator, rank: int) -> Generator:
    """The generator sampling from rank `rank`'s stream (rank 0: one process's); a Claude generator
    has none (it runs in one process)."""
    if hasattr(gen, "sample_stream"):
        gen.sample_stream = rank  # type: ignore[attr-defined]
    return gen
