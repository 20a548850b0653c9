"""Stage `evaluate`: the MAGRPO-trained team (adapters from `train`) on the test split, same protocol."""

from __future__ import annotations

import logging
from pathlib import Path

from orchestry import io
from orchestry.envs.code.prompts import Roles
from orchestry.eval.metrics import compute_metrics
from orchestry.eval.protocols import team
from orchestry.params import Params
from orchestry.stages.from_params import make_policy, make_scorer, sampling_spec, seed_everything
from orchestry.stages.prepare import read_split

ADAPTERS = Path("results/train/adapters")
OUT_DIR = Path("results/evaluate")
log = logging.getLogger("orchestry.stages.evaluate")


def run(params: Params) -> None:
    problems = read_split("test")
    if not problems:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    if not ADAPTERS.is_dir():
        raise FileNotFoundError(
            f"{ADAPTERS} is missing; run the train stage first (dvc repro train)"
        )
    seed_everything(params.seed)
    policy = make_policy(params)
    policy.load_adapters(ADAPTERS)
    roles = Roles.from_agents(params.model.agents)
    e = params.evaluate
    rows = team(
        policy, problems, roles, e.n_samples, sampling_spec(params), make_scorer(params), "magrpo"
    )
    metrics = compute_metrics(rows, e.ks, e.bootstrap, params.seed)
    io.write_jsonl(OUT_DIR / "generations.jsonl", rows)
    io.write_json(OUT_DIR / "metrics.json", metrics)
    log.info(
        "trained team: pass@1 %.3f, mean return %.3f -> %s",
        metrics["pass@1"],
        metrics["return_mean"],
        OUT_DIR,
    )
