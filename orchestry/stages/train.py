"""Stage `train`: MAGRPO on the training split, resumable, logged with dvclive.

`train_loop` is the algorithm's outer loop: pick problems -> roll the team out over the environment
(`algos/tree.py`) -> group advantages per agent (`algos/magrpo.py`) -> one optimizer step per adapter
(`algos/pg_update.py`); then, apart, the bookkeeping: metrics, rollouts, checkpoints, progress.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestry import io, paths
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.magrpo import sample_advantages
from orchestry.algos.pg_update import Optimizers, TrainingFailed, update_agents
from orchestry.algos.tree import ExpertFn, JudgeFn, Rollout, rollout
from orchestry.envs.base import Env
from orchestry.envs.code.problems import Problem, read_problems
from orchestry.eval.metrics import quarter_means
from orchestry.params import Params
from orchestry.stages.from_params import (
    advantage_settings,
    claude_hooks,
    make_env,
    make_policy,
    optimizer_settings,
    rollout_settings,
    sampling_spec,
    seed_everything,
    update_settings,
)

log = logging.getLogger("orchestry.stages.train")


def step_metrics(ro: Rollout, turns: int) -> dict[str, float]:
    """Return per turn, then the environment's metrics averaged over the first turn's joint actions."""
    out: dict[str, float] = {}
    for turn in range(1, turns + 1):
        nodes = [n for n in ro.nodes if n.turn == turn]
        if not nodes:
            continue
        rets = np.array([n.ret for n in nodes])
        out[f"turn{turn}/return_mean"] = float(rets.mean())
        out[f"turn{turn}/return_std"] = float(rets.std())
    first = [n for n in ro.nodes if n.turn == 1]
    keys = dict.fromkeys(k for n in first for k in n.outcome.metrics)  # a key may be n/a for some
    for key in keys:
        out[key] = float(
            np.mean([n.outcome.metrics[key] for n in first if key in n.outcome.metrics])
        )
    for agent in dict.fromkeys(g.agent for g in ro.groups):
        credits = [
            s.credit for g in ro.groups if g.turn == 1 and g.agent == agent for s in g.samples
        ]
        if credits and all(c is not None for c in credits):  # per-agent credit is on
            out[f"credit/{agent}"] = float(np.mean(credits))
    out["return_mean"] = out["turn1/return_mean"]
    return out


def rollout_rows(ro: Rollout, step: int) -> list[dict[str, Any]]:
    """Every generated joint action with its outcome: the input of scheme detection."""
    return [
        {
            "step": step,
            "turn": n.turn,
            "problem_id": n.task.id,
            "code": n.actions(),
            "return": n.ret,
            "judge": n.judge,
            **n.outcome.record,
        }
        for n in ro.nodes
    ]


def schedule_problems(
    problems: list[Problem], per_step: int, epochs: int, seed: int
) -> list[list[str]]:
    """The data order: a seeded permutation per epoch, cut into steps of `per_step` problem ids."""
    steps: list[list[str]] = []
    ids = [p.id for p in problems]
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(ids))
        for i in range(0, len(order), per_step):
            steps.append([ids[j] for j in order[i : i + per_step]])
    return steps


def run_hash(params: Params, problems: list[Problem]) -> str:
    """Identifies a training run (settings + data) so a checkpoint is only resumed by the same run."""
    keys = params.model_dump(include={"seed", "model", "sampling", "sandbox", "reward", "train"})
    keys["problems"] = [p.id for p in problems]
    return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(
    ckpt_dir: Path,
    step: int,
    policy: TeamPolicy,
    opts: Optimizers,
    history: list,
    rollout_bytes: int,
) -> None:
    tmp = ckpt_dir / f".step-{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    policy.save_adapters(tmp / "adapters")
    torch.save(
        {
            "step": step,
            "opts": opts.state_dict(),
            "rng": rng_state(),
            "generate_calls": policy.generate_calls,
            "history": history,
            "rollout_bytes": rollout_bytes,
        },
        tmp / "state.pt",
    )
    io.replace_dir(tmp, ckpt_dir / "last")


def load_checkpoint(ckpt_dir: Path, policy: TeamPolicy, opts: Optimizers) -> dict[str, Any] | None:
    last = ckpt_dir / "last"
    if not (last / "state.pt").is_file():
        return None
    state = torch.load(last / "state.pt", weights_only=False)
    policy.load_adapters(last / "adapters")
    opts.load_state_dict(state["opts"])
    set_rng_state(state["rng"])
    policy.generate_calls = state["generate_calls"]
    return state


def train_loop(
    params: Params,
    policy: TeamPolicy,
    env: Env,
    problems: list[Problem],
    plan: list[list[str]],
    rollouts_path: Path,
    ckpt_dir: Path | None,
    expert: ExpertFn | None = None,
    judge: JudgeFn | None = None,
) -> list[dict[str, float]]:
    """Run the planned steps (resuming from `ckpt_dir/last` if present); returns per-step metrics."""
    by_id = {p.id: p for p in problems}
    sampling, settings = sampling_spec(params), rollout_settings(params)
    advantages, update = advantage_settings(params), update_settings(params)
    opts = Optimizers.create(
        policy,
        params.model.agents,
        params.model.shared_adapter,
        optimizer_settings(params),
        len(plan),
    )
    start, history = _resume(ckpt_dir, rollouts_path, policy, opts)
    with _progress(len(plan), start) as advance:
        for step in range(start, len(plan)):
            t0 = time.perf_counter()
            tasks = [by_id[i] for i in plan[step]]
            # 1. rollout: the team answers, the environment scores, returns flow up the tree
            ro = rollout(policy, env, tasks, sampling, settings, expert, judge)
            # 2. advantages: each agent's samples against their group (MAGRPO)
            rows = sample_advantages(ro.groups, advantages)
            # 3. update: one optimizer step per adapter
            stats = update_agents(policy, opts, rows, update)

            # bookkeeping: metrics, rollouts, checkpoint, progress
            metrics = {"step": step, **step_metrics(ro, params.train.turns), **stats}
            metrics["tokens_per_s"] = ro.new_tokens / max(ro.gen_seconds, 1e-9)
            metrics["step_seconds"] = time.perf_counter() - t0
            history.append(metrics)
            with open(rollouts_path, "a", encoding="utf-8") as fh:
                for row in rollout_rows(ro, step):
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
            done = step + 1
            if ckpt_dir and (done % params.train.checkpoint_every == 0 or done == len(plan)):
                save_checkpoint(ckpt_dir, done, policy, opts, history, rollouts_path.stat().st_size)
            loss = sum(v for k, v in stats.items() if k.startswith("loss"))
            info = f"return {metrics['return_mean']:.2f}  loss {loss:.3f}"
            advance(done, info)
            log.info("step %d/%d %s (%.0f s)", done, len(plan), info, metrics["step_seconds"])
    return history


def _resume(
    ckpt_dir: Path | None, rollouts_path: Path, policy: TeamPolicy, opts: Optimizers
) -> tuple[int, list[dict[str, float]]]:
    """The step to start at and the history so far: from the last checkpoint, else from scratch."""
    rollouts_path.parent.mkdir(parents=True, exist_ok=True)
    state = None
    if ckpt_dir and (ckpt_dir / "last").exists():
        if rollouts_path.exists():
            state = load_checkpoint(ckpt_dir, policy, opts)
        else:
            log.warning(
                "ignoring checkpoint %s: its rollouts file %s is gone", ckpt_dir, rollouts_path
            )
    if state is None:
        rollouts_path.write_bytes(b"")
        return 0, []
    with open(rollouts_path, "r+b") as fh:
        fh.truncate(state["rollout_bytes"])
    log.info("resumed from checkpoint at step %d", state["step"])
    return state["step"], state["history"]


@contextmanager
def _progress(total: int, start: int) -> Iterator[Callable[[int, str], None]]:
    """A progress bar with ETA; yields `advance(done, info)`."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    ]
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("train", total=total, completed=start, info="")

        def advance(done: int, info: str) -> None:
            bar.update(task, completed=done, info=info)

        yield advance


def write_dvclive(history: list[dict[str, float]], live_dir: Path) -> None:
    """Per-step metrics as dvclive files (plots/metrics/*.tsv and metrics.json) for `dvc plots show`."""
    from dvclive import Live

    with Live(dir=str(live_dir), save_dvc_exp=False, dvcyaml=None) as live:
        for row in history:
            for key, value in row.items():
                if key != "step":
                    live.log_metric(key, value)
            live.next_step()


def write_history_csv(history: list[dict[str, float]], path: Path) -> None:
    """One row per step, one column per metric (the figures' and `dvc plots`' input)."""
    keys = list(dict.fromkeys(k for row in history for k in row))
    lines = [",".join(keys)]
    lines += [",".join(f"{row.get(k, '')}" for k in keys) for row in history]
    io.write_text(path, "\n".join(lines) + "\n")


def summarize(history: list[dict[str, float]]) -> dict[str, Any]:
    """Final metrics: first-quarter vs last-quarter mean return and the last step's levels."""
    rets = [h["return_mean"] for h in history]
    first, last = quarter_means(rets)
    return {
        "steps": len(history),
        "return_first_quarter": first,
        "return_last_quarter": last,
        "return_mean": float(np.mean(rets)),
        "pass_rate_last_quarter": quarter_means([h["pass_rate"] for h in history])[1],
        "coop_rate_first_quarter": quarter_means([h["coop_rate"] for h in history])[0],
        "coop_rate_last_quarter": quarter_means([h["coop_rate"] for h in history])[1],
        "tokens_per_s": float(np.mean([h["tokens_per_s"] for h in history])),
    }


def run(params: Params) -> None:
    problems = read_problems(paths.split("train"))
    if not problems:
        raise TrainingFailed("the training split is empty; give prepare.sets some n_train")
    seed_everything(params.seed)
    plan = schedule_problems(
        problems, params.train.problems_per_step, params.train.epochs, params.seed
    )
    if params.train.max_steps:
        plan = plan[: params.train.max_steps]
    policy, env = make_policy(params), make_env(params)
    ckpt_dir = paths.CHECKPOINTS / f"train-{run_hash(params, problems)}"
    expert, judge = claude_hooks(params, paths.TRAIN)
    work = paths.TRAIN / ".partial"
    work.mkdir(parents=True, exist_ok=True)
    history = train_loop(
        params, policy, env, problems, plan, work / "rollouts.jsonl", ckpt_dir, expert, judge
    )
    policy.save_adapters(work / "adapters")
    write_dvclive(history, work / "live")
    io.write_json(work / "metrics.json", summarize(history))
    write_history_csv(history, work / "history.csv")
    for name, final in ((work / "adapters", paths.ADAPTERS), (work / "live", paths.TRAIN_LIVE)):
        io.replace_dir(name, final)
    (work / "rollouts.jsonl").replace(paths.ROLLOUTS)
    (work / "metrics.json").replace(paths.TRAIN_METRICS)
    (work / "history.csv").replace(paths.HISTORY)
    shutil.rmtree(work)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
