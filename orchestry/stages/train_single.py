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

import shutil
from pathlib import Path

from orchestry import io, paths
from orchestry.agents.lora.team import TeamPolicy
from orchestry.params import Params
from orchestry.stages.from_params import make_solo_env, single_agent_params
from orchestry.stages.timings import timing_record, untimed
from orchestry.stages.train import run_training
from orchestry.stages.train_record import summarize, write_history_csv


def run(params: Params) -> None:
    """Train the single agent; rank 0 writes results/train_single/{adapters, metrics, history}."""
    solo = single_agent_params(params)
    run_training("train_single", params, solo, make_solo_env, paths.TRAIN_SINGLE, write_outputs)


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
