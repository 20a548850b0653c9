"""Stage `sft`: the supervised warm start before RL (issue 57; `algos/sft.py`).

The first `sft.problems` training problems (0 = all) teach each agent the answer its role has:
the team's helper its reference helper and main the reference entry point, each prompted as the
team prompts it; the single agent (`train_single`'s) the whole reference program, prompted as it is
prompted. Same problems, epochs, learning rate and batch size for every agent; loss on the answer
tokens only. Writes results/sft/team and results/sft/single (adapters as `train` saves them: each
loads with `PeftModel.from_pretrained`), the per-step history and metrics.json: per adapter (an
agent's; `shared` with `model.shared_adapter`), its rows, steps, answer tokens, and the answer loss
over all its rows before and after.

`train` and `train_single` start from these adapters when `sft.enabled`; `evaluate` and
`evaluate_single` load them instead of RL's with `evaluate.adapters: warm_start` (the comparison
before RL). The stage runs whether or not `sft.enabled` (a tiny version in the CPU pipeline); where
the env has no reference answers (story, writing), it teaches nothing and writes the fresh adapters
(`untaught` in metrics.json), and with `sft.enabled` it stops, saying so.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from typing import Any

import torch

from orchestry import io, paths
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.sft import (
    SftRow,
    SftSettings,
    answer_loss,
    solo_rows,
    supervised_epochs,
    team_rows,
)
from orchestry.params import Params
from orchestry.stages.from_params import (
    make_env,
    make_policy,
    make_solo_env,
    read_tasks,
    seed_everything,
    single_agent_params,
)
from orchestry.stages.train_record import write_history_csv

log = logging.getLogger("orchestry.stages.sft")


def mean_loss(policy: TeamPolicy, rows: Sequence[SftRow], batch_rows: int) -> float:
    """The answer loss per token over all `rows` (one adapter's), without gradients, in batches."""
    total, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(rows), batch_rows):
            batch = rows[start : start + batch_rows]
            n = sum(len(r.answer_ids) for r in batch)
            total += answer_loss(policy, batch, grad=False).item() * n
            tokens += n
    return total / max(tokens, 1)


def teach(
    policy: TeamPolicy, rows: Sequence[SftRow], settings: SftSettings
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Train `policy`'s adapters on `rows`; the step history and each adapter's summary (an
    agent's own; with `model.shared_adapter` the one adapter its agents share)."""
    agents = list(dict.fromkeys(policy.adapter_name(r.agent) for r in rows))
    own = {a: [r for r in rows if policy.adapter_name(r.agent) == a] for a in agents}
    before = {a: mean_loss(policy, own[a], settings.batch_rows) for a in agents}
    history = supervised_epochs(policy, rows, settings)
    summary = {}
    for a in agents:
        steps = [h for h in history if h["agent"] == a]
        summary[a] = {
            "rows": len(own[a]),
            "steps": len(steps),
            "answer_tokens": sum(h["tokens"] for h in steps),
            "loss_before": before[a],
            "loss_after": mean_loss(policy, own[a], settings.batch_rows),
        }
        log.info("sft %s: answer loss %.4f -> %.4f", a, before[a], summary[a]["loss_after"])
    return history, summary


def run(params: Params) -> None:
    """Warm-start the team's adapters, then the single agent's; write results/sft/."""
    s = params.sft
    tasks = read_tasks(params, "train")
    tasks = tasks[: s.problems] if s.problems else tasks
    if not tasks:
        raise FileNotFoundError("the training split is empty; give prepare.sets some n_train")
    settings = SftSettings(epochs=s.epochs, lr=s.lr, batch_rows=s.batch_rows, seed=params.seed)
    work = paths.SFT / ".partial"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = make_env(params)
    history: list[dict[str, Any]] = []
    metrics: dict[str, Any] = {"problems": len(tasks), "epochs": s.epochs, "agents": {}}
    for name, trained in (("team", params), ("single", single_agent_params(params))):
        seed_everything(params.seed)
        policy = make_policy(trained)
        if name == "team":
            rows = team_rows(policy, env, tasks)
        else:
            rows = solo_rows(policy, make_solo_env(params), env, tasks)
        if rows:
            steps, summary = teach(policy, rows, settings)
            history += [{"policy": name, **h} for h in steps]
            metrics["agents"].update(summary)
        elif s.enabled:
            raise ValueError(
                f"sft.enabled: no training problem of env.name {params.env.name} has a reference "
                f"answer for the {name}'s roles to teach; set sft.enabled false"
            )
        else:  # nothing to teach (the text envs have no references): the fresh adapters, as train's
            log.warning(
                "sft: env.name %s has no reference answers; %s untaught", params.env.name, name
            )
            metrics.setdefault("untaught", []).append(name)
        policy.save_adapters(work / name)
        del policy
    write_history_csv(history, work / "history.csv")
    io.write_json(work / "metrics.json", metrics)
    for name, final in (("team", paths.SFT_TEAM), ("single", paths.SFT_SINGLE)):
        io.replace_dir(work / name, final)
    (work / "history.csv").replace(paths.SFT_HISTORY)
    (work / "metrics.json").replace(paths.SFT_METRICS)
    shutil.rmtree(work)
