"""Stage `baseline --name <single|naive_concat|sequential|discussion>`: one collaboration baseline on the test split.

Same base model and sampling as training (untrained adapters, i.e. the base model), unless
`evaluate.single_model` names another model for the single-model baseline or `evaluate.backend: claude`
runs the agents through the Anthropic API.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from orchestry import io
from orchestry.envs.code.prompts import Roles
from orchestry.eval.metrics import compute_metrics
from orchestry.eval.protocols import discussion, sequential, single, team
from orchestry.params import Params
from orchestry.stages.from_params import make_generator, make_scorer, sampling_spec, seed_everything
from orchestry.stages.prepare import read_split

OUT_ROOT = Path("results/baselines")
log = logging.getLogger("orchestry.stages.baseline")


def write_run(out_dir: Path, rows: list[dict[str, Any]], params: Params) -> None:
    """generations.jsonl and metrics.json of one method, both derived from the same rows."""
    e = params.evaluate
    metrics = compute_metrics(rows, e.ks, e.bootstrap, params.seed)
    io.write_jsonl(out_dir / "generations.jsonl", rows)
    io.write_json(out_dir / "metrics.json", metrics)
    log.info(
        "%s: pass@1 %.3f, mean return %.3f, %.1f tokens/s -> %s",
        out_dir.name,
        metrics["pass@1"],
        metrics["return_mean"],
        metrics["tokens_per_s"],
        out_dir,
    )


def run(params: Params, name: str) -> None:
    problems = read_split("test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    seed_everything(params.seed)
    roles = Roles.from_agents(params.model.agents)
    out_dir = OUT_ROOT / name
    n, sampling, scorer = params.evaluate.n_samples, sampling_spec(params), make_scorer(params)
    log.info("baseline %s: %d test problems x %d samples", name, len(problems), n)
    if name == "single":
        model_name = params.evaluate.single_model or params.model.name
        p = params.model_copy(
            update={"model": params.model.model_copy(update={"name": model_name})}
        )
        gen = make_generator(p, ["single"], out_dir)
        rows = single(gen, problems, "single", n, sampling, scorer)
    else:
        gen = make_generator(params, list(roles.agents), out_dir)
        if name == "naive_concat":
            rows = team(gen, problems, roles, n, sampling, scorer, "naive_concat")
        elif name == "sequential":
            rows = sequential(gen, problems, roles, n, sampling, scorer)
        elif name == "discussion":
            rows = discussion(gen, problems, roles, n, sampling, scorer)
        else:
            raise ValueError(f"unknown baseline {name!r}")
    write_run(out_dir, rows, params)
