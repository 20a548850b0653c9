"""Stage `baseline --name <single|naive_concat|sequential|discussion>`: one baseline on the test split.

Same base model and sampling as training (untrained adapters, i.e. the base model), unless
`evaluate.single_model` names another model for the single-model baseline or `evaluate.backend: claude`
runs the agents through the Anthropic API.
"""

from __future__ import annotations

import logging

from orchestry import paths
from orchestry.eval.protocols import discussion, sequential, single, team
from orchestry.eval.records import write_method
from orchestry.params import Params
from orchestry.stages.from_params import (
    make_env,
    make_generator,
    read_tasks,
    sampling_spec,
    seed_everything,
)

log = logging.getLogger("orchestry.stages.baseline")


def run(params: Params, name: str) -> None:
    problems = read_tasks(params, "test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    seed_everything(params.seed)
    env, out_dir = make_env(params, training=False), paths.method_dir(name)
    n, sampling = params.evaluate.n_samples, sampling_spec(params)
    log.info("baseline %s: %d test problems x %d samples", name, len(problems), n)
    if name == "single":
        model_name = params.evaluate.single_model or params.model.name
        p = params.model_copy(
            update={"model": params.model.model_copy(update={"name": model_name})}
        )
        rows = single(make_generator(p, ["single"], out_dir), env, problems, "single", n, sampling)
    else:
        gen = make_generator(params, list(env.roles.agents), out_dir)
        if name == "naive_concat":
            rows = team(gen, env, problems, n, sampling, "naive_concat")
        elif name == "sequential":
            rows = sequential(gen, env, problems, n, sampling)
        elif name == "discussion":
            rows = discussion(gen, env, problems, n, sampling)
        else:
            raise ValueError(f"unknown baseline {name!r}")
    write_method(name, rows, params.evaluate.ks, params.evaluate.bootstrap, params.seed)
