"""Concurrent requests batched into the Generator: a bounded queue and one worker thread.

Requests are accepted into a bounded queue (`submit`; full: `QueueFull`, the server's 429). The
worker takes the first waiting request, then whatever else is waiting (up to `max_batch`, after at
most `wait_s` for more), splits them by batch key (`models.Job.batch_key`) and answers each part in
one generate call. Every accepted request's future gets a reply or an exception: a call that fails
is made again for each of its requests alone (a streamed request that already sent text gets the
error instead: its text cannot be taken back), so a request that cannot be answered gets its own
error and the others their replies; requests still queued at shutdown fail with `ServerClosing`.
A request whose client went away (its future cancelled) is dropped when the worker takes it.

A team turn with its tools on (`models.Served.runs_tools`) leaves the worker while its tool calls
run: a pool of `tool_workers` threads runs them (each in the box, `tool_box.py`), then the turn
joins the queue again (`resume`, never refused: it was accepted) for its next step.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import InvalidStateError, ThreadPoolExecutor
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
    tool_workers: int = 2
    """Team turns' tool calls run at once (each in a box of its own), outside the worker."""

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_queue < 1 or self.wait_s < 0 or self.tool_workers < 1:
            raise ValueError(
                f"need max_batch >= 1, max_queue >= 1, wait_s >= 0, tool_workers >= 1: {self}"
            )


class Batcher:
    """The queue and the worker thread that drains it into `served.answer`."""

    def __init__(self, served: Served, settings: BatchSettings, metrics: ServeMetrics) -> None:
        self.served, self.settings, self.metrics = served, settings, metrics
        self._queue: queue.Queue[Job] = queue.Queue()  # bounded by `submit`; `resume` may pass
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._work, name="orchestry-batcher", daemon=True)
        self._tools = (
            ThreadPoolExecutor(settings.tool_workers, thread_name_prefix="orchestry-tools")
            if served.runs_tools
            else None
        )
        self._at_tools: set[Job] = set()
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
        self.submit_all([job])

    def submit_all(self, jobs: Sequence[Job]) -> None:
        """Accept all of `jobs` (the prompts of one request) or none: QueueFull / ServerClosing."""
        with self._lock:
            if self._closing.is_set():
                raise ServerClosing("the server is shutting down")
            if self._queue.qsize() + len(jobs) > self.settings.max_queue:
                raise QueueFull(
                    f"{self.settings.max_queue} requests are waiting (--max-queue); retry later"
                )
            for job in jobs:
                self._queue.put_nowait(job)
        self.metrics.queue_depth.set(self._queue.qsize())

    def resume(self, job: Job) -> None:
        """Queue an accepted job again (a team turn whose tool calls ran)."""
        with self._lock:
            if not self._closing.is_set():
                self._queue.put_nowait(job)
                return
        _fail(job, ServerClosing("the server shut down before answering"))

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop taking requests, let the worker finish its batch for at most `timeout_s`, fail
        whatever still waits. A generate call still running then is left to end with the process
        (the worker is a daemon thread; its requests were answered 503 by the transport)."""
        with self._lock:
            self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning(
                    "still generating after %g s more (--shutdown-timeout-s): exiting without it",
                    timeout_s,
                )
        if self._tools is not None:
            self._tools.shutdown(wait=False, cancel_futures=True)
        for job in list(self._at_tools):
            _fail(job, ServerClosing("the server shut down before answering"))
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
            # running: no longer cancellable; a job cancelled while it waited is dropped (a
            # resumed team turn already runs)
            self._answer(
                [j for j in batch if j.future.running() or j.future.set_running_or_notify_cancel()]
            )

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
                    if job.stream is None or job.stream.restart():
                        self._call([job])
                    else:  # its stream sent text: another generation could not continue it
                        job.future.set_exception(err)
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
            if reply is not None:
                job.future.set_result(reply)
            else:  # a team turn waits for its tool calls
                self._to_tools(job)

    def _to_tools(self, job: Job) -> None:
        assert self._tools is not None  # `answer` waits for tools only where they run
        self._at_tools.add(job)
        try:
            self._tools.submit(self._run_tools, job)
        except RuntimeError:  # the pool shut down: the server closes
            self._at_tools.discard(job)
            _fail(job, ServerClosing("the server shut down before answering"))

    def _run_tools(self, job: Job) -> None:
        """Run a team turn's tool calls (in the tool pool), then queue its next step."""
        try:
            self.served.run_tools(job)
        except Exception as err:  # noqa: BLE001  # the request gets the error
            log.exception("the tool calls of a request to %s failed", job.model)
            _fail(job, err)
            return
        finally:
            self._at_tools.discard(job)
        self.resume(job)

    def _fail_waiting(self) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job.future.running() or job.future.set_running_or_notify_cancel():
                _fail(job, ServerClosing("the server shut down before answering"))


def _fail(job: Job, err: BaseException) -> None:
    """`job`'s future gets `err`, unless it was answered meanwhile (a race at shutdown)."""
    try:
        job.future.set_exception(err)
    except InvalidStateError:
        pass
