"""Stage `evaluate_single`: the single agent `train_single` trained, on the test split, as the
method `single_grpo`.

The `single` protocol (one model writes the whole answer, n samples per test problem) with the
trained adapter on the team's base model; its rows and metrics go where every method's go
(`eval/records.write_method`). With `evaluate.processes` > 1 the test problems are shared out over
that many processes (`stages/shards.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestry.eval.protocols import single
from orchestry.eval.records import write_method
from orchestry.params import Params
from orchestry.stages.evaluate import evaluated_adapters
from orchestry.stages.from_params import (
    make_env,
    make_policy,
    read_tasks,
    sampling_spec,
    seed_everything,
    single_agent_params,
)
from orchestry.stages.shards import rows_in_shards

METHOD = "single_grpo"


def run(params: Params) -> None:
    problems = read_tasks(params, "test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    adapters = evaluated_adapters(params, single=True)
    seed_everything(params.seed)
    e, solo = params.evaluate, single_agent_params(params)

    def rows_of(tasks: Sequence[Any], rank: int) -> list[dict[str, Any]]:
        policy = make_policy(solo)
        policy.load_adapters(adapters)
        policy.sample_stream = rank
        env = make_env(params, training=False)
        (agent,) = solo.model.agents
        return single(policy, env, tasks, agent, e.n_samples, sampling_spec(params), METHOD)

    rows = rows_in_shards(params, ["evaluate_single"], problems, rows_of)
    if rows is not None:
        write_method(METHOD, rows, e.ks, e.bootstrap, params.seed)
