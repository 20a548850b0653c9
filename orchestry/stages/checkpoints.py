"""The train stage's checkpoints: adapters, optimizers, random states and sampling positions.

Rank 0 writes `<ckpt_dir>/last` (atomically: a temporary folder, then a rename); every rank reads
it, so a run stopped at one number of processes resumes at any other. The random state and the count
of generate calls are kept per rank: at the same number of processes each rank resumes exactly where
it stopped; at another, every rank starts from rank 0's (ranks > 0 sample streams of their own).
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestry import io
from orchestry.agents.lora.dist import ONE_PROCESS, World
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.pg_update import Optimizers


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
    world: World = ONE_PROCESS,
    curriculum: dict[str, Any] | None = None,
    sampler: dict[str, Any] | None = None,
) -> None:
    """Write `ckpt_dir/last` after `step` steps (rank 0; every rank must call it, it gathers);
    `curriculum` is rank 0's curriculum state, kept only when the run has one; `sampler` the random
    state and generate count kept instead of this process's (a pipeline's generating rank's)."""
    own = sampler or {"rng": rng_state(), "generate_calls": policy.generate_calls}
    ranks = world.gather(own)
    if ranks is None:  # not rank 0: its part is in rank 0's hands now
        return
    tmp = ckpt_dir / f".step-{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    policy.save_adapters(tmp / "adapters")
    state = {
        "step": step,
        "opts": opts.state_dict(),
        "rng": ranks[0]["rng"],
        "generate_calls": ranks[0]["generate_calls"],
        "history": history,
        "rollout_bytes": rollout_bytes,
    }
    if world.size > 1:
        state["ranks"] = ranks
    if curriculum is not None:
        state["curriculum"] = curriculum
    torch.save(state, tmp / "state.pt")
    io.replace_dir(tmp, ckpt_dir / "last")


def load_checkpoint(
    ckpt_dir: Path, policy: TeamPolicy, opts: Optimizers, world: World = ONE_PROCESS
) -> dict[str, Any] | None:
    """Load `ckpt_dir/last` into the policy, the optimizers and the random state; None if absent."""
    last = ckpt_dir / "last"
    if not (last / "state.pt").is_file():
        return None
    state = torch.load(last / "state.pt", weights_only=False)
    policy.load_adapters(last / "adapters")
    opts.load_state_dict(state["opts"])
    ranks = state.get("ranks", [])
    own = ranks[world.rank] if len(ranks) == world.size else state
    set_rng_state(own["rng"])
    policy.generate_calls = own["generate_calls"]
    return state
