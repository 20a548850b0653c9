"""Stage `smoke`: the full MAGRPO loop for a few steps on a few problems, with loud checks.

It fails if the loss is not finite, if no adapter changed, or if the sandbox never ran a program, and
writes a deterministic summary (no timings) so a changed result shows up in `git diff`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from orchestry import io, paths
from orchestry.algos.failure import TrainingFailed
from orchestry.params import Params
from orchestry.stages.from_params import make_env, make_policy, read_tasks, seed_everything
from orchestry.stages.train import train_loop
from orchestry.stages.train_from_params import loop_settings


def run(params: Params) -> None:
    problems = read_tasks(params, "train")[: params.smoke.problems]
    if len(problems) < params.smoke.problems:
        raise TrainingFailed(
            f"smoke needs {params.smoke.problems} training problems, have {len(problems)}"
        )
    seed_everything(params.seed)
    policy, env = make_policy(params), make_env(params)
    before = {
        a: {k: v.clone() for k, v in policy.adapter_state(a).items()} for a in params.model.agents
    }
    ids = [p.id for p in problems]
    plan = [ids] * params.smoke.steps
    with tempfile.TemporaryDirectory() as tmp:
        rollouts = Path(tmp) / "rollouts.jsonl"
        settings = loop_settings(params)
        history = train_loop(settings, policy, env, problems, plan, rollouts, ckpt_dir=None)
        rows = io.read_jsonl(rollouts)
    changed = {
        a: any(not torch.equal(before[a][k], v) for k, v in policy.adapter_state(a).items())
        for a in params.model.agents
    }
    # scored: a program the sandbox ran (code), or a text the environment scored above zero
    ran = sum(r["reward"].get("syntax", r["reward"]["total"]) > 0 for r in rows)
    if not any(changed.values()):
        raise TrainingFailed(
            "smoke: no adapter changed after the update steps (all advantages zero?)"
        )
    if ran == 0:
        raise TrainingFailed(
            "smoke: nothing was scored (code: no completion defined a parsing main; text: "
            "every joint action scored 0)"
        )
    summary = {
        "steps": len(history),
        "problems": ids,
        "programs": len(rows),
        "programs_tested": ran,
        "adapters_changed": changed,
        "return_mean": [round(h["return_mean"], 6) for h in history],
        "loss": [{k: round(v, 6) for k, v in h.items() if k.startswith("loss/")} for h in history],
    }
    io.write_json(paths.SMOKE, summary)
