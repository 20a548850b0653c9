"""Stage `train`: MAGRPO on the training split, resumable, logged with dvclive.

`train_loop` is the algorithm's outer loop: pick problems -> roll the team out over the environment
(`algos/tree.py`) -> group advantages per agent (`algos/magrpo.py`) -> one optimizer step per adapter
(`algos/pg_update.py`); then, apart, the bookkeeping: metrics, rollouts, checkpoints, progress.

Data-parallel (`train.processes`, or `torchrun --nproc_per_node N -m orchestry train`): each process
rolls out its share of every step's problems, the update sums the adapters' gradients over the
processes, and rank 0 alone writes rollouts, logs, checkpoints and outputs. One process runs the
loop exactly as it ran before (`orchestry.agents.lora.dist`). With `train.parallel: pipeline` two
processes split the work instead: rank 1 generates and scores, rank 0 updates (`train_pipeline.py`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestry import io, paths
from orchestry.agents.lora.base_model import device_type
from orchestry.agents.lora.dist import (
    ONE_PROCESS,
    World,
    end_world,
    start_world,
    world_from_env,
)
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.curriculum import Curriculum, schedule_problems
from orchestry.algos.failure import TrainingFailed
from orchestry.algos.magrpo import sample_advantages
from orchestry.algos.pg_update import Optimizers, update_agents
from orchestry.algos.rollout_queue import RolloutQueue
from orchestry.algos.tree import ExpertFn, JudgeFn, Rollout, StartedRollout, start_rollout
from orchestry.envs.base import Env
from orchestry.envs.code.problems import difficulty_rank
from orchestry.params import Params
from orchestry.stages.checkpoints import load_checkpoint, save_checkpoint
from orchestry.stages.from_params import (
    make_env,
    make_policy,
    read_tasks,
    seed_everything,
)
from orchestry.stages.launch import launched_ranks
from orchestry.stages.progress import progress_bar
from orchestry.stages.timings import timing_record, untimed
from orchestry.stages.train_from_params import LoopSettings, claude_hooks, loop_settings
from orchestry.stages.train_record import (
    check_dvclive,
    summarize,
    write_dvclive,
    write_history_csv,
)

log = logging.getLogger("orchestry.stages.train")

PIPELINE = "orchestry.stages.train_pipeline"
"""`train.parallel: pipeline`'s module, imported only then (orchestry/bookkeeping/plugins.py)."""


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
            **n.tool_record(),
        }
        for n in ro.nodes
    ]


def gather_rollout(ro: Rollout, world: World, order: Sequence[str]) -> Rollout | None:
    """On rank 0, every rank's rollout of the step as one, its nodes in the order one process makes
    them (turn, then the step's problem order); None on the other ranks."""
    if world.size == 1:
        return ro
    ro.drop_details()
    parts = world.gather(ro)
    if parts is None:
        return None
    position = {pid: i for i, pid in enumerate(order)}
    nodes = sorted(
        (n for part in parts for n in part.nodes), key=lambda n: (n.turn, position[n.task.id])
    )
    return Rollout(
        roots=[n for n in nodes if n.turn == 1],
        nodes=nodes,
        groups=[g for part in parts for g in part.groups],
        gen_seconds=max(part.gen_seconds for part in parts),  # the ranks generate side by side
        new_tokens=sum(part.new_tokens for part in parts),
    )


def run_hash(params: Params, problems: list[Any], start: Path | None = None) -> str:
    """Identifies a training run (settings + data, and the adapters it starts from when not fresh:
    `start`) so a checkpoint is only resumed by the same run; the number of processes is left out:
    a run resumes at any."""
    keys = params.model_dump(
        include={"seed", "model", "sampling", "sandbox", "env", "reward", "train"}
    )
    del keys["train"]["processes"]
    keys["problems"] = [p.id for p in problems]
    if start is not None:  # a run from other warm-start adapters is another run
        digest = hashlib.sha256()
        for f in sorted(p for p in start.rglob("*") if p.is_file()):
            digest.update(f"{f.relative_to(start)}\0".encode() + f.read_bytes())
        keys["warm_start"] = digest.hexdigest()
    return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]


def train_loop(
    s: LoopSettings,
    policy: TeamPolicy,
    env: Env,
    problems: list[Any],
    plan: list[list[str]],
    rollouts_path: Path,
    ckpt_dir: Path | None,
    expert: ExpertFn | None = None,
    judge: JudgeFn | None = None,
    world: World = ONE_PROCESS,
) -> list[dict[str, float]]:
    """Run the planned steps (resuming from `ckpt_dir/last` if present); returns per-step metrics.

    With several processes (`world`) every rank calls this with the same plan and rolls out its
    share of each step; rank 0 returns the metrics over all ranks, the others an empty list.
    With `train.curriculum: easy_first` the steps after the plan's first epoch take the problems
    `algos/curriculum.Curriculum` draws (rank 0's, shared), in the same number of steps.
    """
    by_id = {p.id: p for p in problems}
    sampling, settings, advantages, update = s.sampling, s.rollout, s.advantages, s.update
    opts = Optimizers.create(policy, s.agents, s.shared_adapter, s.optimizer, len(plan))
    curriculum = None
    if s.curriculum == "easy_first":
        curriculum = Curriculum(
            plan, list(by_id), s.problems_per_step, s.curriculum_promote, s.seed
        )
    start, history = _resume(ckpt_dir, rollouts_path, policy, opts, world, curriculum)
    policy.sample_stream = world.rank  # rank 0 samples as one process would, the others their own
    adapters = [p for o in opts.optimizers.values() for p in o.param_groups[0]["params"]]
    world.copy_from_main(adapters)
    # rank 1 generates, rank 0 updates alone; the pipeline module is imported only when chosen
    parallel = importlib.import_module(PIPELINE) if s.parallel == "pipeline" else None
    pipeline = parallel is not None and parallel.pipelined(world, s.parallel)
    ranks = world if world.size > 1 and not pipeline else None  # else the single-process update
    share = ONE_PROCESS if pipeline else world

    def generate(step: int) -> tuple[list[str], StartedRollout]:
        """Step's problems (rank 0's curriculum picks them for all), this rank's share rolled out
        (a node's G siblings never span ranks): the team answers; scoring comes with `finish`."""
        ids = plan[step] if curriculum is None else world.share(curriculum.problems(step))
        tasks = [by_id[i] for i in ids[share.rank :: share.size]]
        return ids, start_rollout(policy, env, tasks, sampling, settings, expert, judge)

    def checkpoint_after(step: int) -> bool:
        return ckpt_dir is not None and (step + 1) % s.checkpoint_every == 0

    if pipeline and not world.is_main:
        ahead = s.rollouts_ahead
        parallel.generate_steps(  # type: ignore[union-attr]  # pipeline: imported above
            world, policy, adapters, generate, start, len(plan), ahead, checkpoint_after
        )
        return []
    queue: Any = (
        parallel.Learner(world, adapters, len(plan))  # type: ignore[union-attr]
        if pipeline
        else RolloutQueue(generate, s.rollouts_ahead, len(plan), checkpoint_after)
    )
    with queue, progress_bar("train", "steps", len(plan), start, world.is_main) as advance:
        for step in range(start, len(plan)):
            t0 = time.perf_counter()
            # 1. rollout: the team answers, the environment scores, returns flow up the tree
            # (generated up to train.rollouts_ahead steps before, `algos/rollout_queue.py`)
            ids, ro = queue.take(step)
            # 2. advantages: each agent's samples against their group (MAGRPO)
            rows = sample_advantages(ro.groups, advantages)
            # 3. update: one optimizer step per adapter (gradients summed over the ranks)
            stats = update_agents(policy, opts, rows, update, ranks, step)
            if pipeline:
                queue.publish(step)  # the new adapters to the generating rank

            # bookkeeping on rank 0, over every rank's nodes: metrics, rollouts, checkpoint, progress
            whole = gather_rollout(ro, share, ids)
            done = step + 1
            if whole is not None:
                metrics = {"step": step, **step_metrics(whole, settings.turns), **stats}
                metrics["tokens_per_s"] = whole.new_tokens / max(whole.gen_seconds, 1e-9)
                metrics["step_seconds"] = time.perf_counter() - t0
                if curriculum is not None:  # success: each first-turn joint action's pass rate
                    curriculum.observe(
                        (n.task.id, n.outcome.metrics["pass_rate"]) for n in whole.roots
                    )
                    metrics["curriculum/mastered"] = float(curriculum.mastered())
                history.append(metrics)
                with open(rollouts_path, "a", encoding="utf-8") as fh:
                    for row in rollout_rows(whole, step):
                        fh.write(json.dumps(row, sort_keys=True) + "\n")
            if ckpt_dir and (done % s.checkpoint_every == 0 or done == len(plan)):
                size = rollouts_path.stat().st_size if world.is_main else 0
                kept = curriculum.state() if curriculum else None
                # over the ranks that roll out (`share`); a pipeline's rank 0 alone keeps rank 1's
                # sampler, sent with the rollout: no collective
                sampler = queue.sampler if pipeline else None
                save_checkpoint(ckpt_dir, done, policy, opts, history, size, share, kept, sampler)
            if whole is not None:
                loss = sum(v for k, v in stats.items() if k.startswith("loss"))
                info = f"return {metrics['return_mean']:.2f}  loss {loss:.3f}"
                advance(done, info)
                log.info("step %d/%d %s (%.0f s)", done, len(plan), info, metrics["step_seconds"])
    return history if world.is_main else []


def _resume(
    ckpt_dir: Path | None,
    rollouts_path: Path,
    policy: TeamPolicy,
    opts: Optimizers,
    world: World,
    curriculum: Curriculum | None = None,
) -> tuple[int, list[dict[str, float]]]:
    """The step to start at and the history so far (and the curriculum's state): from the last
    checkpoint, else from scratch."""
    rollouts_path.parent.mkdir(parents=True, exist_ok=True)
    resume = False
    if world.is_main and ckpt_dir and (ckpt_dir / "last").exists():
        resume = rollouts_path.exists()
        if not resume:
            log.warning(
                "ignoring checkpoint %s: its rollouts file %s is gone", ckpt_dir, rollouts_path
            )
    # rank 0 decides for every rank: it alone writes the files it looked at
    state = None
    if world.share(resume) and ckpt_dir:
        state = load_checkpoint(ckpt_dir, policy, opts, world)
    if state is None:
        if world.is_main:
            rollouts_path.write_bytes(b"")
        return 0, []
    if world.is_main:
        with open(rollouts_path, "r+b") as fh:
            fh.truncate(state["rollout_bytes"])
        log.info("resumed from checkpoint at step %d", state["step"])
    if curriculum is not None:
        curriculum.restore(state["curriculum"])
    return state["step"], state["history"]


def training_plan(params: Params) -> tuple[list[Any], list[list[str]]]:
    """The training split and each step's problem ids, seeded: every stage that trains on these
    params (`train`, `train_single`) takes the same problems in the same order."""
    world_size = world_from_env().size
    if world_size > params.train.problems_per_step:
        raise TrainingFailed(
            f"{world_size} training processes but train.problems_per_step is "
            f"{params.train.problems_per_step}: each process needs at least one problem a step; "
            "start fewer processes or raise train.problems_per_step"
        )
    problems = read_tasks(params, "train")
    if not problems:
        raise TrainingFailed("the training split is empty; give prepare.sets some n_train")
    seed_everything(params.seed)
    grade = difficulty_rank if params.train.curriculum == "by_grade" else None
    plan = schedule_problems(
        problems, params.train.problems_per_step, params.train.epochs, params.seed, grade
    )
    return problems, plan[: params.train.max_steps] if params.train.max_steps else plan


def training_hooks(
    params: Params, out_dir: Path, world: World
) -> tuple[ExpertFn | None, JudgeFn | None]:
    """The Claude hooks the train section asks for (their ledger in `out_dir`); one process only."""
    expert, judge = claude_hooks(params, out_dir)
    if world.size > 1 and (expert or judge):
        raise TrainingFailed(
            "train.feedback expert_edits and train.judge_weight > 0 (Claude) run in one "
            "training process only: set train.processes to 1"
        )
    return expert, judge


def run_places(
    stage: str, trained: Params, problems: list[Any], start: Path | None, out_dir: Path
) -> tuple[Path, Path]:
    """Where a training stage keeps what a rerun resumes: its checkpoint folder (named by the run,
    `run_hash`) and its work folder (the rollouts so far; the outputs before they move into place)."""
    return paths.CHECKPOINTS / f"{stage}-{run_hash(trained, problems, start)}", out_dir / ".partial"


def run(params: Params) -> None:
    """The train stage: this process alone, one rank under torchrun, or the launcher of
    `train.processes` ranks; rank 0 writes the outputs."""
    check_dvclive()
    run_training("train", params, params, make_env, paths.TRAIN, write_outputs)


def run_training(
    stage: str,
    params: Params,
    trained: Params,
    env_of: Callable[[Params], Env],
    out_dir: Path,
    write: Callable[[TeamPolicy, list[dict[str, float]], Path, Path], None],
) -> None:
    """A training stage (`train`, `train_single`): the plan from `params`, the policy, hooks and
    loop from `trained` (the team's params, or the single agent's), the env `env_of(params)`;
    rank 0 hands the run to `write` (policy, history, work folder, checkpoint folder)."""
    start = paths.warm_start(single=stage == "train_single") if params.sft.enabled else None
    if start is not None and not (start / "policy.json").is_file():
        raise FileNotFoundError(
            f"sft.enabled is true but {start} holds no adapters; run the sft stage first "
            "(dvc repro sft) or set sft.enabled false"
        )
    if launched_ranks(params, params.train.processes, [stage], "train.processes"):
        return
    problems, plan = training_plan(params)
    world = start_world(device_type(params.model.device))
    try:
        if not world.is_main:  # rank 0 speaks for the run
            logging.getLogger("orchestry").setLevel(logging.WARNING)
        policy, env = make_policy(trained), env_of(params)
        if start is not None:  # RL starts from the warm start (stage sft)
            policy.load_adapters(start)
        ckpt_dir, work = run_places(stage, trained, problems, start, out_dir)
        expert, judge = training_hooks(trained, out_dir, world)
        work.mkdir(parents=True, exist_ok=True)
        rollouts = work / "rollouts.jsonl"
        settings = loop_settings(trained)
        history = train_loop(
            settings, policy, env, problems, plan, rollouts, ckpt_dir, expert, judge, world
        )
        world.barrier()  # every rank is done with the checkpoint before rank 0 removes it
        if world.is_main:
            write(policy, history, work, ckpt_dir)
    finally:
        end_world(world)


def write_outputs(
    policy: TeamPolicy, history: list[dict[str, float]], work: Path, ckpt_dir: Path
) -> None:
    """The stage's outputs from the finished run, moved into place; the checkpoints go."""
    policy.save_adapters(work / "adapters")
    write_dvclive(untimed(history), work / "live")  # timings apart: stages/timings.py
    io.write_json(work / "metrics.json", summarize(history))
    write_history_csv(untimed(history), work / "history.csv")
    io.write_json(paths.timing("train"), timing_record(history))
    for name, final in ((work / "adapters", paths.ADAPTERS), (work / "live", paths.TRAIN_LIVE)):
        io.replace_dir(name, final)
    (work / "rollouts.jsonl").replace(paths.ROLLOUTS)
    (work / "metrics.json").replace(paths.TRAIN_METRICS)
    (work / "history.csv").replace(paths.HISTORY)
    shutil.rmtree(work)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
