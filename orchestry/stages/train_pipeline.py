"""Pipeline training on 2 processes (`train.parallel: pipeline`): rank 1 generates and scores every
step's rollouts while rank 0 updates on the step before.

With `train.rollouts_ahead` k >= 1 one process generates step s with the adapters of
`updates_before(s)` updates (`algos/rollout_queue.py`): up to k updates old, never across a
checkpoint. The pipeline keeps that order on two processes:

- rank 1 waits for those adapters (rank 0 broadcasts them after each of its updates), generates step
  s from the sample stream one process would use, and hands the step to a worker thread that scores
  it in the sandbox and sends it to rank 0 (a gloo group of its own), while the next step generates;
- rank 0 takes each step's scored rollout, updates alone (no gradients to sum), broadcasts the new
  adapters and keeps the books: metrics, rollouts, checkpoints. A checkpoint keeps rank 1's random
  state and generate count, sent with the rollout, so a resumed run samples what the whole one did.

So samples, rollouts and adapters are those of one process at the same `rollouts_ahead`, and a step
takes the longer of generation and update rather than their sum.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from orchestry.agents.lora.dist import World
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.failure import TrainingFailed
from orchestry.algos.rollout_queue import updates_before
from orchestry.algos.tree import Rollout, StartedRollout
from orchestry.stages.checkpoints import rng_state

GENERATOR, LEARNER = 1, 0
"""The ranks: rank 0 updates and writes the outputs, rank 1 generates."""


@dataclass(frozen=True)
class Failed:
    """What rank 1 sends instead of a step whose scoring raised (on the worker thread); an error
    in generation raises on rank 1's main thread and ends the run through the launcher."""

    step: int
    error: str


def pipelined(world: World, parallel: str) -> bool:
    """True when this run is a pipeline: `train.parallel: pipeline` on 2 processes (one process
    runs the one-process loop, which the pipeline reproduces)."""
    if parallel != "pipeline" or world.size == 1:
        return False
    if world.size != 2:
        raise TrainingFailed(
            f"train.parallel pipeline runs on 2 processes (one generates, one updates), the "
            f"launcher started {world.size}"
        )
    return True


class Learner:
    """Rank 0's end of the pipeline: each step's scored rollout in, the adapters out."""

    def __init__(self, world: World, adapters: Sequence[torch.nn.Parameter], end: int) -> None:
        self._world, self._adapters, self._end = world, list(adapters), end
        self._group = dist.new_group(backend="gloo")  # every rank creates it, in this order
        self.sampler: dict[str, Any] | None = None
        """Rank 1's random state and generate count right after it generated the last step taken."""

    def take(self, step: int) -> tuple[list[str], Rollout]:
        box: list[Any] = [None]
        dist.recv_object_list(box, src=GENERATOR, group=self._group)
        message = box[0]
        if isinstance(message, Failed):
            raise TrainingFailed(
                f"the generating process (rank {GENERATOR}) failed at step {message.step}:\n"
                f"{message.error}"
            )
        sent, ids, ro, self.sampler = message
        if sent != step:
            raise TrainingFailed(
                f"pipeline out of order: rank {GENERATOR} sent step {sent}, not {step}"
            )
        return ids, ro

    def publish(self, step: int) -> None:
        """The adapters after `step`'s update to rank 1 (which waits for each but the last)."""
        if step + 1 < self._end:
            self._world.copy_from_main(self._adapters)

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def generate_steps(
    world: World,
    policy: TeamPolicy,
    adapters: Sequence[torch.nn.Parameter],
    generate: Callable[[int], tuple[list[str], StartedRollout]],
    start: int,
    end: int,
    ahead: int,
    checkpoint_after: Callable[[int], bool],
) -> None:
    """Rank 1's loop: steps `start` .. `end - 1`, each generated once the updates before it arrived,
    scored and sent to rank 0 by a worker thread (in order: one worker)."""
    group = dist.new_group(backend="gloo")
    policy.sample_stream = 0  # one process's stream: rank 0 never samples
    have, params = start, list(adapters)
    sent: list[Future[None]] = []

    def receive_until(updates: int) -> None:
        nonlocal have
        while have < updates:
            world.copy_from_main(params)
            have += 1

    with ThreadPoolExecutor(1, thread_name_prefix="score") as pool:
        for step in range(start, end):
            receive_until(updates_before(step, ahead, start, checkpoint_after))
            ids, started = generate(step)
            sampler = {"rng": rng_state(), "generate_calls": policy.generate_calls}
            sent.append(pool.submit(_score_and_send, group, step, ids, started, sampler))
        receive_until(end - 1)
    for done in sent:
        done.result()


def _score_and_send(
    group: Any, step: int, ids: list[str], started: StartedRollout, sampler: dict[str, Any]
) -> None:
    try:
        ro = started.finish()
        ro.drop_details()  # the sandbox's reports stay home, as with data-parallel ranks
        message: Any = (step, ids, ro, sampler)
    except Exception:
        # forwarded, traceback and all, so rank 0 raises TrainingFailed naming rank 1 and the
        # step; unsent, rank 0 would wait in `recv` until the 30-minute collective timeout
        message = Failed(step, traceback.format_exc())
    dist.send_object_list([message], dst=LEARNER, group=group)
