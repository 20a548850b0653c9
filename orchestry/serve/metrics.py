"""The server's Prometheus metrics (GET /metrics), in a registry of their own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
UNSERVED = "unserved"
"""The `model` label of a request naming no served model (or none): a client's name is no label,
so made-up names cannot grow the metrics."""
_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)


class ServeMetrics:
    """Requests by model and status, the queue, batches and generated tokens."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "orchestry_requests",
            "Chat and completions requests by model (a served name, or unserved) and HTTP status",
            ["model", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "orchestry_request_seconds",
            "Accepted request to reply",
            ["model"],
            buckets=_SECONDS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "orchestry_queue_depth", "Requests waiting for the worker", registry=r
        )
        self.batch_size = Histogram(
            "orchestry_batch_size",
            "Requests answered by one generate call",
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=r,
        )
        self.generate_seconds = Histogram(
            "orchestry_generate_seconds",
            "Wall time of one generate call",
            buckets=_SECONDS,
            registry=r,
        )
        self.completion_tokens = Counter(
            "orchestry_completion_tokens", "Tokens generated", ["model"], registry=r
        )
        self.prompt_tokens = Counter(
            "orchestry_prompt_tokens", "Prompt tokens read", ["model"], registry=r
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)
