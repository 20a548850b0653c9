"""Rollouts generated ahead of their update, each scored on a worker thread (`train.rollouts_ahead`).

With `ahead = 0` (the default) a step generates its rollouts, scores them and updates, in this
order, in this thread: the paper's on-policy loop. With `ahead = k > 0` the model generates up to k
steps' rollouts before it takes the update that precedes them, while worker threads score the
earlier ones in the sandbox, side by side. The GPU then generates while programs run, and a program
that runs into its timeout holds up its own update only once the generations queued behind it are
done.
The price: the rollouts a step updates on were sampled by the adapters of up to k updates before
(no importance weighting, as the paper's loss has no behaviour probabilities).
`benchmarks/gpu_step.py` measures what each k buys on a GPU.

The queue never generates across a checkpoint: a step whose update ends with a checkpoint is the
last one generated before that update. A run resumed from a checkpoint therefore takes the same
rollouts as the uninterrupted run.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from orchestry.algos.tree import Rollout, StartedRollout

Key = TypeVar("Key")


def updates_before(
    step: int, ahead: int, start: int, checkpoint_after: Callable[[int], bool]
) -> int:
    """How many updates `RolloutQueue` has taken when it generates `step`, in a run (or its
    resumed part) that starts at step `start`: the adapters that sample `step`. Up to `ahead` steps
    early, never across a checkpoint (`stages/train_pipeline.py` keeps this order on 2 processes)."""
    first = max(start, step - ahead)
    for done in range(first, step):  # a checkpoint after update `done` holds the later steps back
        if checkpoint_after(done):
            first = done + 1
    return first


class RolloutQueue(Generic[Key]):
    """Steps' rollouts in order: `take(step)` returns step's, having generated up to `ahead` more.

    `start(step)` generates a step's first turn on the calling thread and returns a key (what the
    caller needs back with it) and the started rollout; `checkpoint_after(step)` says whether
    step's update ends with a checkpoint."""

    def __init__(
        self,
        start: Callable[[int], tuple[Key, StartedRollout]],
        ahead: int,
        end: int,
        checkpoint_after: Callable[[int], bool],
    ) -> None:
        if ahead < 0:
            raise ValueError(f"rollouts ahead must be at least 0, got {ahead}")
        self._start, self._ahead, self._end = start, ahead, end
        self._checkpoint_after = checkpoint_after
        self._queue: deque[tuple[int, Key, StartedRollout | Future[Rollout]]] = deque()
        # every queued step may be scoring at once: a program waiting out its timeout holds up
        # only its own step, not the scoring of the steps generated after it
        self._pool = ThreadPoolExecutor(ahead + 1, thread_name_prefix="score") if ahead else None

    def take(self, step: int) -> tuple[Key, Rollout]:
        """Step's key and scored rollout (generating it if it is not queued yet)."""
        if not self._queue:
            self._launch(step)
        if self._queue[0][0] != step:
            raise ValueError(
                f"rollouts taken out of order: step {step}, queued {self._queue[0][0]}"
            )
        nxt = self._queue[-1][0] + 1
        while (
            len(self._queue) <= self._ahead
            and nxt < self._end
            and not self._checkpoint_after(nxt - 1)
        ):
            self._launch(nxt)
            nxt += 1
        _, key, work = self._queue.popleft()
        return key, work.result() if isinstance(work, Future) else work.finish()

    def _launch(self, step: int) -> None:
        key, started = self._start(step)
        work = self._pool.submit(started.finish) if self._pool else started
        self._queue.append((step, key, work))

    def close(self) -> None:
        """Wait for the scoring in flight and stop the worker."""
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RolloutQueue[Key]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
