"""The retry policy of `ClaudeClient`: which HTTP errors are retried and how long to wait first.

The SDK's own retries are off (max_retries=0) so that every attempt is budget-checked and logged.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping

# HTTP statuses worth retrying: request timeout, rate limit, server errors (529 = overloaded).
RETRYABLE_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait the server asks for: `retry-after-ms`, else `retry-after` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass  # malformed header: fall through to retry-after, then to our own backoff
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass  # not seconds: maybe an HTTP date
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def backoff_seconds(attempt: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(max_s, base_s * 2**(attempt-1))]."""
    return rng.uniform(0.0, min(max_s, base_s * 2 ** (attempt - 1)))
