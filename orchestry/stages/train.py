"""Stage `train`: MAGRPO on the training split, resumable, logged with dvclive.

One step, top to bottom: pick problems -> roll the team out (env prompts, batched sampling, sandbox,
level reward, returns) -> group advantages per agent -> each agent's loss on its own completions ->
clip and step each agent's optimizer -> log metrics, append rollouts, checkpoint every N steps.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestry import io
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.magrpo import group_advantages, kl_k3, policy_loss
from orchestry.algos.tree import ExpertFn, JudgeFn, Rollout, rollout
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.prompts import Roles
from orchestry.envs.code.reward import RewardWeights
from orchestry.eval.metrics import quarter_means
from orchestry.params import Params
from orchestry.stages.from_params import (
    claude_hooks,
    make_policy,
    rollout_settings,
    sampling_spec,
    sandbox_limits,
    seed_everything,
)
from orchestry.stages.prepare import read_split

log = logging.getLogger("orchestry.stages.train")

OUT_DIR = Path("results/train")
CHECKPOINT_ROOT = Path("cache/checkpoints")
MICROBATCH = 8


class TrainingFailed(RuntimeError):
    """The loss went non-finite or training made no progress it should have."""


def lr_lambda(schedule: str, warmup: int, total: int):
    """Linear warm-up, then constant / linear decay / cosine decay to zero at `total` steps."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return (
            1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        )

    return factor


@dataclass
class Optimizers:
    """One AdamW + scheduler per trained adapter (one in total with a shared adapter)."""

    optimizers: dict[str, torch.optim.Optimizer]
    schedulers: dict[str, torch.optim.lr_scheduler.LambdaLR]

    @classmethod
    def create(
        cls, policy: TeamPolicy, agents: list[str], shared: bool, params: Params, total: int
    ) -> Optimizers:
        t = params.train
        owners = agents[:1] if shared else agents
        opts = {
            a: torch.optim.AdamW(
                policy.trainable_parameters(a), lr=t.lr, weight_decay=t.weight_decay
            )
            for a in owners
        }
        scheds = {
            a: torch.optim.lr_scheduler.LambdaLR(o, lr_lambda(t.schedule, t.warmup_steps, total))
            for a, o in opts.items()
        }
        return cls(opts, scheds)

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizers": {a: o.state_dict() for a, o in self.optimizers.items()},
            "schedulers": {a: s.state_dict() for a, s in self.schedulers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for a, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][a])
        for a, s in self.schedulers.items():
            s.load_state_dict(state["schedulers"][a])


def agent_batches(
    ro: Rollout, settings: Params
) -> dict[str, list[tuple[list[int], list[int], float]]]:
    """Per agent: (prompt ids, completion ids, advantage) for every sample, advantages per group."""
    t = settings.train
    rows: dict[str, list[tuple[list[int], list[int], float]]] = {}
    for group in ro.groups:
        adv = group_advantages(
            torch.tensor([group.values()]), t.advantage_mode, t.normalize, t.std_floor
        )[0]
        for sample, a in zip(group.samples, adv.tolist(), strict=True):
            rows.setdefault(group.agent, []).append((sample.prompt_ids, sample.token_ids, a))
    return rows


def update_agents(
    policy: TeamPolicy,
    opts: Optimizers,
    rows: dict[str, list[tuple[list[int], list[int], float]]],
    params: Params,
) -> dict[str, float]:
    """One optimizer step per adapter on -A * log pi; rows with A == 0 or no tokens carry no gradient."""
    t = params.train
    stats: dict[str, float] = {}
    for owner, opt in opts.optimizers.items():
        agents = list(rows) if params.model.shared_adapter else [owner]
        opt.zero_grad(set_to_none=True)
        n_rows = sum(len(rows.get(a, [])) for a in agents)
        loss_total, kl_total, kl_rows = 0.0, 0.0, 0
        for agent in agents:
            # rows with A == 0 carry no policy gradient; with the KL term every row counts
            live = [
                r for r in rows.get(agent, []) if len(r[1]) > 0 and (r[2] != 0.0 or t.kl_coef > 0)
            ]
            for i in range(0, len(live), MICROBATCH):
                chunk = live[i : i + MICROBATCH]
                prompts, completions = [r[0] for r in chunk], [r[1] for r in chunk]
                tok_logp, mask = policy.token_logprobs(agent, prompts, completions, grad=True)
                adv = torch.tensor(
                    [r[2] for r in chunk], dtype=tok_logp.dtype, device=tok_logp.device
                )
                # policy_loss averages over the chunk; rescale so the step averages over all n_rows
                share = len(chunk) / max(1, n_rows)
                loss = policy_loss(adv, tok_logp.sum(-1), mask.sum(-1), t.logprob_reduction) * share
                if t.kl_coef > 0:
                    with torch.no_grad():
                        ref_logp, _ = policy.token_logprobs(
                            agent, prompts, completions, grad=False, reference=True
                        )
                    kl = kl_k3(tok_logp, ref_logp, mask)
                    loss = loss + t.kl_coef * kl.mean() * share
                    kl_total += kl.sum().item()
                    kl_rows += len(chunk)
                if not torch.isfinite(loss):
                    raise TrainingFailed(f"non-finite loss for agent {agent}: {loss.item()}")
                loss.backward()
                loss_total += loss.item()
        params_list = [p for p in opt.param_groups[0]["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(params_list, t.grad_clip).item()
        if not math.isfinite(grad_norm):
            raise TrainingFailed(f"non-finite gradient norm for adapter {owner}")
        opt.step()
        opts.schedulers[owner].step()
        stats[f"loss/{owner}"] = loss_total
        stats[f"grad_norm/{owner}"] = grad_norm
        if t.kl_coef > 0:
            stats[f"kl/{owner}"] = kl_total / max(1, kl_rows)
    return stats


def step_metrics(ro: Rollout, turns: int) -> dict[str, float]:
    """Return per turn, each reward level and the cooperation rate of one step's rollout."""
    out: dict[str, float] = {}
    for turn in range(1, turns + 1):
        nodes = [n for n in ro.nodes if n.turn == turn]
        if not nodes:
            continue
        rets = np.array([n.ret for n in nodes])
        out[f"turn{turn}/return_mean"] = float(rets.mean())
        out[f"turn{turn}/return_std"] = float(rets.std())
    first = [n for n in ro.nodes if n.turn == 1]
    for level in ("structure", "syntax", "tests", "cooperation", "total"):
        out[f"reward/{level}"] = float(np.mean([getattr(n.reward, level) for n in first]))
    out["pass_rate"] = float(np.mean([n.reward.pass_rate for n in first]))
    out["coop_rate"] = float(
        np.mean([n.reward.main_calls_aux and n.reward.pass_rate > 0 for n in first])
    )
    out["return_mean"] = out["turn1/return_mean"]
    return out


def rollout_rows(ro: Rollout, step: int, roles: Roles) -> list[dict[str, Any]]:
    """Every generated joint action with its reward breakdown: the input of scheme detection."""
    return [
        {
            "step": step,
            "turn": n.turn,
            "problem_id": n.problem.id,
            "helper_names": [h.name for h in n.problem.helpers],
            "main_name": n.problem.main.name,
            "code": {a: s.code for a, s in n.samples.items()},
            "reward": n.reward.to_dict(),
            "return": n.ret,
            "judge": n.judge,
            "first_failure": n.report.first_failure if n.report else None,
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
    problems: list[Problem],
    plan: list[list[str]],
    rollouts_path: Path,
    ckpt_dir: Path | None,
    expert: ExpertFn | None = None,
    judge: JudgeFn | None = None,
) -> list[dict[str, float]]:
    """Run the planned steps (resuming from `ckpt_dir/last` if present); returns per-step metrics."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    roles = Roles.from_agents(params.model.agents)
    by_id = {p.id: p for p in problems}
    opts = Optimizers.create(
        policy, list(params.model.agents), params.model.shared_adapter, params, len(plan)
    )
    history: list[dict[str, float]] = []
    start = 0
    rollouts_path.parent.mkdir(parents=True, exist_ok=True)
    state = None
    if ckpt_dir and (ckpt_dir / "last").exists():
        if rollouts_path.exists():
            state = load_checkpoint(ckpt_dir, policy, opts)
        else:
            log.warning(
                "ignoring checkpoint %s: its rollouts file %s is gone", ckpt_dir, rollouts_path
            )
    if state is not None:
        start, history = state["step"], state["history"]
        with open(rollouts_path, "r+b") as fh:
            fh.truncate(state["rollout_bytes"])
        log.info("resumed from checkpoint at step %d", start)
    else:
        rollouts_path.write_bytes(b"")
    limits, sampling, settings = (
        sandbox_limits(params),
        sampling_spec(params),
        rollout_settings(params),
    )
    weights = RewardWeights(**params.reward.model_dump())
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
        task = bar.add_task("train", total=len(plan), completed=start, info="")
        for step in range(start, len(plan)):
            t0 = time.perf_counter()
            batch = [by_id[i] for i in plan[step]]
            ro = rollout(
                policy,
                batch,
                roles,
                sampling,
                settings,
                weights,
                limits,
                params.sandbox.workers,
                expert,
                judge,
            )
            stats = update_agents(policy, opts, agent_batches(ro, params), params)
            metrics = {"step": step, **step_metrics(ro, params.train.turns), **stats}
            metrics["tokens_per_s"] = ro.new_tokens / max(ro.gen_seconds, 1e-9)
            metrics["step_seconds"] = time.perf_counter() - t0
            history.append(metrics)
            with open(rollouts_path, "a", encoding="utf-8") as fh:
                for row in rollout_rows(ro, step, roles):
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
            done = step + 1
            if ckpt_dir and (done % params.train.checkpoint_every == 0 or done == len(plan)):
                save_checkpoint(ckpt_dir, done, policy, opts, history, rollouts_path.stat().st_size)
            info = f"return {metrics['return_mean']:.2f}  loss {sum(v for k, v in stats.items() if k.startswith('loss')):.3f}"
            bar.update(task, completed=done, info=info)
            log.info("step %d/%d %s (%.0f s)", done, len(plan), info, metrics["step_seconds"])
    return history


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
        "coop_rate_last_quarter": quarter_means([h["coop_rate"] for h in history])[1],
        "tokens_per_s": float(np.mean([h["tokens_per_s"] for h in history])),
    }


def run(params: Params) -> None:
    problems = read_split("train")
    if not problems:
        raise TrainingFailed("the training split is empty; give prepare.sets some n_train")
    seed_everything(params.seed)
    plan = schedule_problems(
        problems, params.train.problems_per_step, params.train.epochs, params.seed
    )
    if params.train.max_steps:
        plan = plan[: params.train.max_steps]
    policy = make_policy(params)
    ckpt_dir = CHECKPOINT_ROOT / f"train-{run_hash(params, problems)}"
    expert, judge = claude_hooks(params, OUT_DIR)
    work = OUT_DIR / ".partial"
    work.mkdir(parents=True, exist_ok=True)
    history = train_loop(
        params, policy, problems, plan, work / "rollouts.jsonl", ckpt_dir, expert, judge
    )
    policy.save_adapters(work / "adapters")
    write_dvclive(history, work / "live")
    io.write_json(work / "metrics.json", summarize(history))
    write_history_csv(history, work / "history.csv")
    for name in ("adapters", "live"):
        io.replace_dir(work / name, OUT_DIR / name)
    (work / "rollouts.jsonl").replace(OUT_DIR / "rollouts.jsonl")
    (work / "metrics.json").replace(OUT_DIR / "metrics.json")
    (work / "history.csv").replace(OUT_DIR / "history.csv")
    shutil.rmtree(work)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
