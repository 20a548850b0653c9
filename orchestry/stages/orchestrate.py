"""Stage `orchestrate` (opt-in): a learned orchestrator over a pool of agents, against fixed orders.

One policy per cost weight λ (`orchestrate.cost_weights`): at each decision a small head over the
frozen base's embedding of the task and the transcript (algos/orchestrator.py) picks the next member
of the pool (the environment's roles and a tester, algos/agent_pool.py) or stops. REINFORCE on
r - λ·C over the train split, `episodes` episodes per update, checkpointed every `checkpoint_every`
updates (an interrupted run resumes where it stopped). Then, on the test split, `evaluate.n_samples`
episodes per task for each learned policy (decisions sampled) and for the fixed orders of the same
pool: every role at once (the team), the roles in role order (sequential), the pool in turn.

Outputs: results/orchestrate/{metrics.json, episodes.jsonl, history.csv} and reports/orchestrate/
{results.md, cost_accuracy.png, transitions.png}.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from orchestry import io, paths  # noqa: E402
from orchestry.agents.lora.embed import mean_hidden_states  # noqa: E402
from orchestry.agents.lora.team import TeamPolicy  # noqa: E402
from orchestry.algos.agent_pool import (  # noqa: E402
    TESTER,
    AgentPool,
    Transcript,
    as_record,
    fixed_orders,
    transitions,
)
from orchestry.algos.orchestrator import (  # noqa: E402
    OrchestratorPolicy,
    OrchestratorSettings,
    adam,
    reinforce_update,
    rollout_batch,
)
from orchestry.bookkeeping.provenance import MANIFEST, stage_manifest, write_run_record  # noqa: E402
from orchestry.eval.orchestration import results_table, summarize, verdict  # noqa: E402
from orchestry.params import Params  # noqa: E402
from orchestry.stages.from_params import (  # noqa: E402
    make_env,
    make_policy,
    read_tasks,
    sampling_spec,
    seed_everything,
)
from orchestry.stages.progress import progress_bar  # noqa: E402

log = logging.getLogger("orchestry.stages.orchestrate")


def settings(params: Params, cost_weight: float) -> OrchestratorSettings:
    o = params.orchestrate
    return OrchestratorSettings(
        lr=o.lr,
        gamma=o.gamma,
        entropy_coef=o.entropy_coef,
        baseline_momentum=o.baseline_momentum,
        grad_clip=o.grad_clip,
        cost_weight=cost_weight,
        max_steps=o.max_steps,
    )


@dataclass(frozen=True)
class StateView:
    """What the orchestrator's state shows of a transcript (`orchestrate.state_*`, `max_steps`)."""

    chars: int
    tokens: int
    max_steps: int


def state_view(params: Params) -> StateView:
    o = params.orchestrate
    return StateView(o.state_chars, o.state_tokens, o.max_steps)


class Episodes:
    """The three callables `rollout_batch` drives, over one list of tasks (episode i: tasks[i]);
    the final outcomes are kept for the rows."""

    def __init__(self, view: StateView, pool: AgentPool, policy: TeamPolicy, tasks: list) -> None:
        self.view, self.pool, self.policy, self.tasks = view, pool, policy, tasks
        self.outcomes: dict[int, Any] = {}

    def states(self, batch: list[tuple[int, Transcript]]) -> torch.Tensor:
        texts = [self.pool.state_text(self.tasks[i], t, self.view.chars) for i, t in batch]
        main = self.pool.env.roles.main
        emb = mean_hidden_states(self.policy, main, texts, self.view.tokens)
        feats = torch.tensor([self.pool.features(t, self.view.max_steps) for _, t in batch])
        return torch.cat([emb, feats.float()], dim=1)

    def acts(self, calls: list[tuple[int, int, Transcript]]) -> list[tuple[Any, float]]:
        members = self.pool.members
        entries = self.pool.call([(self.tasks[i], members[a], t) for i, a, t in calls])
        return [(e, e.cost) for e in entries]

    def scores(self, finals: list[tuple[int, Transcript]]) -> list[float]:
        outcomes = self.pool.score([(self.tasks[i], t) for i, t in finals])
        self.outcomes = {i: o for (i, _), o in zip(finals, outcomes, strict=True)}
        return [o.total for o in outcomes]


def run_hash(params: Params, adapters: Path | None) -> str:
    """A checkpoint is resumed only by the same run: settings, data and the pool's adapters."""
    keys = params.model_dump(
        include={"seed", "model", "sampling", "sandbox", "env", "reward", "orchestrate"}
    )
    keys["feedback"] = params.train.feedback
    digest = hashlib.sha256(json.dumps(keys, sort_keys=True).encode())
    for f in sorted(adapters.rglob("*")) if adapters else []:
        if f.is_file():
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def train_head(
    params: Params, pool: AgentPool, policy: TeamPolicy, tasks: list, k: int, ckpt: Path
) -> tuple[OrchestratorPolicy, list[dict[str, float]]]:
    """REINFORCE updates for cost weight number k, resuming from `ckpt` when it is there."""
    o, lam = params.orchestrate, params.orchestrate.cost_weights[k]
    s = settings(params, lam)
    order = random.Random(params.seed + k).sample(tasks, len(tasks))
    probe = Episodes(state_view(params), pool, policy, order[:1]).states([(0, ())])
    torch.manual_seed(params.seed + k)
    head = OrchestratorPolicy(probe.shape[1], len(pool.members), o.hidden)
    opt = adam(head, s)
    gen = torch.Generator().manual_seed(params.seed + k)
    start, baseline, history = 0, None, []
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["generator"])
        policy.generate_calls = state["generate_calls"]
        start, baseline, history = state["update"], state["baseline"], state["history"]
        log.info("λ = %g: resuming after update %d of %d", lam, start, o.updates)
    with progress_bar(f"orchestrate λ={lam:g}", "updates", o.updates, start) as advance:
        for u in range(start, o.updates):
            batch = [order[(u * o.episodes + j) % len(order)] for j in range(o.episodes)]
            run = Episodes(state_view(params), pool, policy, batch)
            eps = rollout_batch(head, len(batch), run.states, run.acts, run.scores, s, gen)
            stats, baseline = reinforce_update(head, opt, eps, s, baseline)
            history.append({"cost_weight": lam, "update": u + 1, **stats})
            advance(u + 1, f"return {stats['return']:.3f} cost {stats['cost']:.0f}")
            if (u + 1) % o.checkpoint_every == 0 or u + 1 == o.updates:
                tmp = ckpt.with_suffix(".tmp")
                torch.save(
                    {
                        "head": head.state_dict(),
                        "opt": opt.state_dict(),
                        "generator": gen.get_state(),
                        "generate_calls": policy.generate_calls,
                        "update": u + 1,
                        "baseline": baseline,
                        "history": history,
                    },
                    tmp,
                )
                tmp.replace(ckpt)
    return head, history


def episode_rows(
    method: str, lam: float | None, tasks: list, episodes: list[tuple[Transcript, Any]], n: int
) -> list[dict[str, Any]]:
    """One row per test episode (tasks[i] is sample i % n of its problem)."""
    rows = []
    for i, (task, (transcript, outcome)) in enumerate(zip(tasks, episodes, strict=True)):
        row = {
            "method": method,
            "cost_weight": lam,
            "problem_id": task.id,
            "sample": i % n,
            "members": [e.member for e in transcript],
            "reward": outcome.total,
            "cost": sum(e.cost for e in transcript),
            "calls": len(transcript),
        }
        if "correct" in outcome.record:
            row["correct"] = float(bool(outcome.record["correct"]))
        rows.append({**row, "transcript": as_record(transcript)})
    return rows


def run(params: Params) -> None:
    started = time.time()
    o, e = params.orchestrate, params.evaluate
    train_tasks, test_tasks = read_tasks(params, "train"), read_tasks(params, "test")
    if not train_tasks or not test_tasks:
        raise FileNotFoundError(
            "orchestrate needs both splits; give prepare.sets n_train and n_test"
        )
    seed_everything(params.seed)
    env = make_env(params)  # with train.feedback: the tester reports in its words
    policy = make_policy(params)
    adapters = paths.ADAPTERS if o.adapters == "trained" else None
    if adapters is not None:
        if not adapters.is_dir():
            raise FileNotFoundError(
                f"{adapters} is missing; run the train stage first (dvc repro train), or set "
                "orchestrate.adapters: base"
            )
        policy.load_adapters(adapters)
    members = [*env.roles.agents, *([TESTER] if o.tester else [])]
    pool = AgentPool(env, policy, sampling_spec(params), members, o.tool_cost)
    ckpt_dir = paths.CHECKPOINTS / f"orchestrate-{run_hash(params, adapters)}"
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    heads, history = [], []
    for k in range(len(o.cost_weights)):
        head, h = train_head(params, pool, policy, train_tasks, k, ckpt_dir / f"lambda{k}.pt")
        heads.append(head)
        history += h

    n = e.n_samples
    tasks = [t for t in test_tasks for _ in range(n)]
    orders = fixed_orders(env.roles.agents, members, o.max_steps)
    fixed = {}
    for name, order in orders.items():
        log.info("fixed order %s on %d test episodes", name, len(tasks))
        fixed[name] = episode_rows(name, None, tasks, pool.run_order(tasks, order), n)
    learned, blocks = [], []
    for k, (lam, head) in enumerate(zip(o.cost_weights, heads, strict=True)):
        log.info("learned orchestrator λ = %g on %d test episodes", lam, len(tasks))
        run_ = Episodes(state_view(params), pool, policy, tasks)
        # decisions sampled, as in training: REINFORCE optimizes the stochastic policy's return,
        # and its argmax can be a different (worse) policy
        picks = torch.Generator().manual_seed(params.seed + 1 + k)
        eps = rollout_batch(
            head, len(tasks), run_.states, run_.acts, run_.scores, settings(params, lam), picks
        )
        done = [(ep.transcript, run_.outcomes[i]) for i, ep in enumerate(eps)]
        rows = episode_rows("learned", lam, tasks, done, n)
        learned += rows
        blocks.append(
            {
                "cost_weight": lam,
                "learned": summarize(rows, lam, e.bootstrap, params.seed),
                "fixed": {m: summarize(r, lam, e.bootstrap, params.seed) for m, r in fixed.items()},
                "verdict": verdict(rows, fixed, lam, e.bootstrap, params.seed),
                "transitions": transitions([r["members"] for r in rows], members),
            }
        )
    metrics = {"pool": members, "fixed_orders": orders, "by_cost_weight": blocks}
    record = stage_manifest("orchestrate", params.model_dump(mode="json"))
    episodes = [*learned, *(r for rows in fixed.values() for r in rows)]
    write_outputs(metrics, episodes, history, record)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    write_run_record("orchestrate", started, Path.cwd())


def write_outputs(
    metrics: dict, rows: list[dict], history: list[dict[str, float]], record: dict[str, Any]
) -> None:
    """Every output into a temporary folder first, then moved into place; `record` is the
    manifest of reports/orchestrate/."""
    work, reports = paths.ORCHESTRATE / ".partial", paths.ORCHESTRATE_REPORTS / ".partial"
    for d in (work, reports):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    io.write_json(work / "metrics.json", metrics)
    io.write_jsonl(work / "episodes.jsonl", rows)
    with (work / "history.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(history[0]))
        writer.writeheader()
        writer.writerows(history)
    io.write_text(reports / "results.md", results_table(metrics))
    plot_cost_accuracy(metrics, reports / "cost_accuracy.png")
    plot_transitions(metrics, reports / "transitions.png")
    io.write_json(reports / MANIFEST, record)
    for name in ("metrics.json", "episodes.jsonl", "history.csv"):
        (work / name).replace(paths.ORCHESTRATE / name)
    for name in ("results.md", "cost_accuracy.png", "transitions.png", MANIFEST):
        (reports / name).replace(paths.ORCHESTRATE_REPORTS / name)
    shutil.rmtree(work)
    shutil.rmtree(reports)


def plot_cost_accuracy(metrics: dict, path: Path) -> None:
    """Reward against cost: the fixed orders (grey) and the learned orchestrator per λ, 95% CIs."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    first = metrics["by_cost_weight"][0]
    points = [(name, s, "0.5", "s") for name, s in first["fixed"].items()]
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.8, len(metrics["by_cost_weight"])))
    points += [
        (f"learned λ={b['cost_weight']:g}", b["learned"], c, "o")
        for b, c in zip(metrics["by_cost_weight"], colors, strict=True)
    ]
    for label, s, color, marker in points:
        x, y = s["cost_mean"], s["reward_mean"]
        ax.errorbar(
            x,
            y,
            xerr=[[x - s["cost_ci95"][0]], [s["cost_ci95"][1] - x]],
            yerr=[[y - s["reward_ci95"][0]], [s["reward_ci95"][1] - y]],
            fmt=marker,
            color=color,
            capsize=3,
        )
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("cost per episode (tokens; a tester call at the tool cost)")
    ax.set_ylabel("reward (test split)")
    ax.set_title("Learned orchestrator vs fixed orders: accuracy against cost")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_transitions(metrics: dict, path: Path) -> None:
    """Who follows whom in the learned orchestrator's test episodes, one panel per λ (row shares)."""
    blocks = metrics["by_cost_weight"]
    fig, axes = plt.subplots(1, len(blocks), figsize=(4.2 * len(blocks), 3.8), squeeze=False)
    for ax, b in zip(axes[0], blocks, strict=True):
        t = b["transitions"]
        counts = np.asarray(t["counts"], dtype=float)
        shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
        for (r, c), v in np.ndenumerate(counts):
            ax.text(c, r, f"{int(v)}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(t["cols"])), t["cols"], rotation=30)
        ax.set_yticks(range(len(t["rows"])), t["rows"])
        ax.set_xlabel("next")
        ax.set_title(f"λ = {b['cost_weight']:g}")
    axes[0][0].set_ylabel("from")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
