"""The batching worker over a Generator that cannot answer one request: the batch that fails is
answered again request by request, so only that request gets the error (issue 58, finding 1)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from conftest import sampling

from orchestry.agents.base import Generation, GenRequest, SamplingSpec
from orchestry.serve.batcher import Batcher, BatchSettings
from orchestry.serve.metrics import ServeMetrics
from orchestry.serve.models import Served


class Picky:
    """A Generator that fails every call holding a message with "boom" in it."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def generate(self, requests: Sequence[GenRequest], spec: SamplingSpec) -> list[Generation]:
        self.calls.append(len(requests))
        if any("boom" in m["content"] for r in requests for m in r.messages):
            raise ValueError("boom in the batch")
        return [Generation(r.agent, ["fine"], [[1]], [1, 2], 0.0, 1) for r in requests]


def test_a_failing_batch_is_retried_request_by_request():
    gen = Picky()
    served = Served(gen, ["main"], None, None)
    batcher = Batcher(served, BatchSettings(8, 8, 1.0), ServeMetrics())
    spec = sampling(max_new_tokens=4)
    jobs = [
        served.job("main", [{"role": "user", "content": text}], spec, None)
        for text in ("a", "boom", "b")
    ]
    for job in jobs:  # queued before the worker starts: one batch
        batcher.submit(job)
    batcher.start()
    try:
        assert jobs[0].future.result(10).text == "fine"
        assert jobs[2].future.result(10).text == "fine"
        with pytest.raises(ValueError, match="boom in the batch"):
            jobs[1].future.result(10)
    finally:
        batcher.close()
    assert gen.calls == [3, 1, 1, 1]
