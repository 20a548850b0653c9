"""Concurrent requests batched into the Generator: a bounded queue and one worker thread.

Requests are accepted into a bounded queue (`submit`; full: `QueueFull`, the server's 429). The
worker takes the first waiting request, then whatever else is waiting (up to `max_batch`, after at
most `wait_s` for more), splits them by batch key (`models.Job.batch_key`) and answers each part in
one generate call. Every accepted request's future gets a reply or an exception: a call that fails
is made again for each of its requests alone, so a request that cannot be answered gets its own
error and the others their replies; requests still queued at shutdown fail with `ServerClosing`.
A request whose client went away (its future cancelled) is dropped when the worker takes it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from orchestry.serve.metrics import ServeMetrics
from orchestry.serve.models import Job, Served

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """The queue holds `max_queue` requests; the client should retry later."""


class ServerClosing(RuntimeError):
    """The server is shutting down; the request was not answered."""


@dataclass(frozen=True)
class BatchSettings:
    """How requests are batched."""

    max_batch: int
    """Most requests in one generate call (1 = one at a time)."""
    max_queue: int
    """Most requests waiting; one more is refused (429)."""
    wait_s: float
    """How long the worker waits for more requests once one is waiting and the batch is not full."""

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_queue < 1 or self.wait_s < 0:
            raise ValueError(f"need max_batch >= 1, max_queue >= 1, wait_s >= 0: {self}")


class Batcher:
    """The queue and the worker thread that drains it into `served.answer`."""

    def __init__(self, served: Served, settings: BatchSettings, metrics: ServeMetrics) -> None:
        self.served, self.settings, self.metrics = served, settings, metrics
        self._queue: queue.Queue[Job] = queue.Queue(maxsize=settings.max_queue)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._work, name="orchestry-batcher", daemon=True)
        self.batches = 0

    @property
    def alive(self) -> bool:
        """Whether the worker runs (else nothing queued would be answered)."""
        return self._thread.is_alive() and not self._closing.is_set()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Accept `job` (its future will be answered) or raise QueueFull / ServerClosing."""
        if self._closing.is_set():
            raise ServerClosing("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull(
                f"{self.settings.max_queue} requests are waiting (--max-queue); retry later"
            ) from None
        self.metrics.queue_depth.set(self._queue.qsize())

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop taking requests, let the worker finish its batch, fail whatever still waits."""
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._fail_waiting()

    # ------------------------------------------------------------------ the worker

    def _work(self) -> None:
        while not self._closing.is_set():
            try:
                first = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            batch = [first]
            deadline = time.monotonic() + self.settings.wait_s
            while len(batch) < self.settings.max_batch:
                try:
                    batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            self.metrics.queue_depth.set(self._queue.qsize())
            # running: no longer cancellable; a job cancelled while it waited is dropped
            self._answer([j for j in batch if j.future.set_running_or_notify_cancel()])

    def _answer(self, batch: Sequence[Job]) -> None:
        groups: dict[tuple, list[Job]] = {}
        for job in batch:
            groups.setdefault(job.batch_key(), []).append(job)
        for jobs in groups.values():
            self._call(jobs)

    def _call(self, jobs: Sequence[Job]) -> None:
        """Answer `jobs` in one generate call; if it fails, each alone (so one request that
        cannot be answered fails only itself)."""
        start = time.perf_counter()
        try:
            replies = self.served.answer(jobs)
            if len(replies) != len(jobs):
                raise RuntimeError(f"{len(jobs)} requests got {len(replies)} replies")
        except Exception as err:  # noqa: BLE001  # the request(s) of the call get the error
            if len(jobs) > 1:
                log.warning("generate failed for %d requests (%r); each alone", len(jobs), err)
                for job in jobs:
                    self._call([job])
                return
            log.exception("generate failed for a request to %s", jobs[0].model)
            jobs[0].future.set_exception(err)
            return
        seconds = time.perf_counter() - start
        self.batches += 1
        self.metrics.batch_size.observe(len(jobs))
        self.metrics.generate_seconds.observe(seconds)
        log.info(
            "batch %d: %d request(s) for %s in %.2f s (%d waiting)",
            self.batches,
            len(jobs),
            ",".join(sorted({j.model for j in jobs})),
            seconds,
            self._queue.qsize(),
        )
        for job, reply in zip(jobs, replies, strict=True):
            job.future.set_result(reply)

    def _fail_waiting(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(ServerClosing("the server shut down before answering"))
