"""Stage `train_single`: one agent trained like the team, the paper's "single fine-tuned" baseline.

The same base model with ONE LoRA adapter (agent `single`), trained by the team's loop
(`stages/train.train_loop`: rollout -> group advantages -> update) with the team's `train` section:
the same steps, problems per step, group size, learning rate and seed, so the same problems in the
same order. It sees the whole task as one model alone is given it and is scored by the team's
environment as the team's joint action (`envs/solo.SoloEnv`). A trained team compared with it tells
what cooperation adds beyond training; `evaluate_single` puts it on the test split (`single_grpo`).

Resumable like `train` (its own checkpoints, `cache/checkpoints/train_single-<run hash>`), and
data-parallel with `train.processes`.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from orchestry import io, paths
from orchestry.agents.lora.base_model import device_type
from orchestry.agents.lora.dist import end_world, start_world
from orchestry.agents.lora.team import TeamPolicy
from orchestry.params import Params
from orchestry.stages.from_params import make_policy, make_solo_env, single_agent_params
from orchestry.stages.launch import launched_ranks
from orchestry.stages.timings import timing_record, untimed
from orchestry.stages.train import run_hash, train_loop, training_hooks, training_plan
from orchestry.stages.train_record import summarize, write_history_csv


def run(params: Params) -> None:
    """Train the single agent; rank 0 writes results/train_single/{adapters, metrics, history}."""
    if launched_ranks(params, params.train.processes, ["train_single"], "train.processes"):
        return
    problems, plan = training_plan(params)
    solo = single_agent_params(params)
    world = start_world(device_type(params.model.device))
    try:
        if not world.is_main:  # rank 0 speaks for the run
            logging.getLogger("orchestry").setLevel(logging.WARNING)
        policy, env = make_policy(solo), make_solo_env(params)
        ckpt_dir = paths.CHECKPOINTS / f"train_single-{run_hash(solo, problems)}"
        expert, judge = training_hooks(solo, paths.TRAIN_SINGLE, world)
        work = paths.TRAIN_SINGLE / ".partial"
        work.mkdir(parents=True, exist_ok=True)
        history = train_loop(
            solo,
            policy,
            env,
            problems,
            plan,
            work / "rollouts.jsonl",
            ckpt_dir,
            expert,
            judge,
            world,
        )
        world.barrier()  # every rank is done with the checkpoint before rank 0 removes it
        if world.is_main:
            write_outputs(policy, history, work, ckpt_dir)
    finally:
        end_world(world)


def write_outputs(
    policy: TeamPolicy, history: list[dict[str, float]], work: Path, ckpt_dir: Path
) -> None:
    """The adapter, the summary and the per-step history moved into place; the rollouts (kept
    only for resuming) and the checkpoints go."""
    policy.save_adapters(work / "adapters")
    io.write_json(work / "metrics.json", summarize(history))
    write_history_csv(untimed(history), work / "history.csv")
    io.write_json(paths.timing("train_single"), timing_record(history))
    io.replace_dir(work / "adapters", paths.SINGLE_ADAPTERS)
    (work / "metrics.json").replace(paths.SINGLE_METRICS)
    (work / "history.csv").replace(paths.SINGLE_HISTORY)
    shutil.rmtree(work)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
