"""Claude through the Anthropic Messages API: one client with a hard budget, retries, cache, ledger.

Two modules use it: `critics` (`expert_edits`, per-agent suggestions for multi-turn feedback, and
`judge_cooperation`, an optional cooperation score for the reward) and `agents` (`ClaudeAgents`,
Claude models as the team's agents, with the same `generate` shape as the local policy).

Accounting. Before every HTTP attempt the client computes the worst case the attempt could cost:
an upper bound on the input tokens plus `max_tokens` output tokens (see `pricing`). If what was
spent plus that worst case exceeds `budget_usd`, the attempt is not made and `BudgetExceeded` is
raised. After a reply the actual cost from `usage` is added. An attempt whose outcome is unknown (a
timeout, or a 200 reply whose body cannot be read) may still have been billed, so its worst case is
counted as spent and recorded as `estimated_usd` in the ledger; HTTP errors and refused connections
cost nothing. Retries follow `retry` (which errors, how long to wait), each one budget-checked.

Sampling. API version 2026-10-21, which anthropic SDK 2.x sends, has no sampling parameters
(temperature, top_p and top_k are rejected with a 400), so none are sent: replies are not
deterministic, and it is the cache that makes a rerun reproduce them.

Every call that reaches the API or the cache appends one fsync'd JSON line to the ledger (time,
model, token counts, cost, request hash, cached, attempts, outcome). The API key is read only from
ANTHROPIC_API_KEY (or passed explicitly) and is never written to the ledger, the cache or the
logs; prompts are not written to the ledger either.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic

from orchestry import io
from orchestry.agents.claude.pricing import (
    TokenUsage,
    usage_cost,
    worst_case_input_tokens,
)
from orchestry.agents.claude.retry import RETRYABLE_STATUS, backoff_seconds, retry_after_seconds

log = logging.getLogger(__name__)

API_KEY_ENV = "ANTHROPIC_API_KEY"


@dataclass(frozen=True, kw_only=True)
class ClaudeSettings:
    """Everything the client needs; validated once when constructed.

    The fields without a default come from params `anthropic` (the one home of their defaults)."""

    model: str
    """Model id; must have an entry in `prices`."""
    max_tokens: int
    """Default output limit per call (also the output part of the worst-case cost)."""
    base_url: str | None = None
    """API endpoint; None = the SDK default."""
    timeout_s: float
    """Per-attempt HTTP timeout."""
    max_attempts: int
    """Total attempts per call on retryable errors."""
    backoff_base_s: float = 1.0
    """First backoff ceiling; doubles per attempt (full jitter); a retry-after header wins."""
    backoff_max_s: float = 30.0
    """Largest backoff ceiling."""
    budget_usd: float
    """Hard spending limit for this client (one run)."""
    prices: Mapping[str, tuple[float, float]]
    """model -> (input $/Mtok, output $/Mtok)."""
    cache_dir: str | None = None
    """On-disk reply cache; None disables it."""
    ledger_path: str
    """JSON-lines ledger, one line per call, e.g. results/<stage>/api_ledger.jsonl."""

    def __post_init__(self) -> None:
        if self.model not in self.prices:
            raise ValueError(
                f"model {self.model!r} has no price: add it to prices as "
                f"(input $/Mtok, output $/Mtok); priced models: {sorted(self.prices)}"
            )
        for model, pair in self.prices.items():
            if len(pair) != 2 or any(not math.isfinite(p) or p < 0 for p in pair):
                raise ValueError(f"prices[{model!r}] must be two non-negative numbers, not {pair}")
        checks = {
            "max_tokens": self.max_tokens >= 1,
            "timeout_s": self.timeout_s > 0,
            "max_attempts": self.max_attempts >= 1,
            "backoff_base_s": self.backoff_base_s >= 0,
            "backoff_max_s": self.backoff_max_s >= self.backoff_base_s,
            "budget_usd": self.budget_usd >= 0,
            "ledger_path": bool(self.ledger_path),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid Claude settings: {', '.join(bad)} (got {self!r})")


class BudgetExceeded(RuntimeError):
    """A call was refused because its worst-case cost would exceed the budget."""


class ClaudeCallFailed(RuntimeError):
    """A call failed: a non-retryable error, an unreadable reply, or all attempts used up."""


class MissingApiKey(RuntimeError):
    """ANTHROPIC_API_KEY is not set."""


@dataclass(frozen=True)
class ClaudeReply:
    """One completed call: the text, its usage and what it cost (0 when served from the cache)."""

    text: str
    stop_reason: str | None
    usage: TokenUsage
    cost_usd: float
    cached: bool
    attempts: int
    request_hash: str


def _request_hash(request: Mapping[str, Any]) -> str:
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class _UnreadableReply(Exception):
    """A 200 reply whose body is not a Messages API message."""


def _reply_fields(message: Any) -> tuple[str, str | None, TokenUsage]:
    """Text, stop reason and usage of an SDK message, checked (the SDK does not validate shapes)."""
    if not isinstance(message, anthropic.types.Message):
        raise _UnreadableReply(f"reply is {type(message).__name__}, not a message")
    content, usage = message.content, message.usage
    if not isinstance(content, list):
        raise _UnreadableReply("reply has no content list")
    if usage is None or not all(
        isinstance(getattr(usage, name, None), int) for name in ("input_tokens", "output_tokens")
    ):
        raise _UnreadableReply("reply has no usage.input_tokens/output_tokens")
    text = "".join(
        block.text for block in content if getattr(block, "type", None) == "text" and block.text
    )
    tokens = TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )
    return text, message.stop_reason, tokens


class ClaudeClient:
    """Messages API calls under a hard budget, with our retry policy, a reply cache and a ledger."""

    def __init__(
        self,
        settings: ClaudeSettings,
        api_key: str | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV, "")
        if not key.strip():
            raise MissingApiKey(
                f"{API_KEY_ENV} is not set: export your Anthropic API key as {API_KEY_ENV} to use "
                "Claude (expert_edits feedback, the judge term, the claude backend), or turn those "
                "features off in params.yaml"
            )
        self.settings = settings
        self._price = settings.prices[settings.model]
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        # max_retries=0: the retry policy is ours (budget-checked, logged, testable), not the SDK's.
        self._sdk = anthropic.Anthropic(
            api_key=key, base_url=settings.base_url, max_retries=0, timeout=settings.timeout_s
        )
        self._spent_usd = 0.0
        # one call at a time: the budget check and the spend stay one step when worker threads
        # share the client (the scoring of `train.rollouts_ahead`)
        self._lock = threading.Lock()
        self.calls = 0  # calls that reached the API or the cache: one ledger line each
        self.http_requests = 0  # HTTP attempts sent, retries included

    @property
    def spent_usd(self) -> float:
        """Dollars counted against the budget: actual usage plus worst cases of unknown outcomes."""
        return self._spent_usd

    def complete(
        self,
        system: str,
        messages: list[dict[str, Any]],
        max_tokens: int | None = None,
        *,
        sample_index: int = 0,
    ) -> ClaudeReply:
        """One Messages API call, or a cache hit. `sample_index` separates repeated samples."""
        with self._lock:
            return self._complete(system, messages, max_tokens, sample_index)

    def _complete(
        self,
        system: str,
        messages: list[dict[str, Any]],
        max_tokens: int | None,
        sample_index: int,
    ) -> ClaudeReply:
        settings = self.settings
        max_tokens = settings.max_tokens if max_tokens is None else max_tokens
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        request: dict[str, Any] = {
            "model": settings.model,
            "system": system,
            "messages": messages,
            "max_tokens": max_tokens,
        }
        request_hash = _request_hash({**request, "sample_index": sample_index})
        cached = self._cache_read(request_hash)
        if cached is not None:
            self._record(
                request_hash, "cached", 0, usage=cached.usage, stop_reason=cached.stop_reason
            )
            return cached
        worst_case = usage_cost(
            TokenUsage(worst_case_input_tokens(system, messages), max_tokens), self._price
        )
        kwargs = {key: value for key, value in request.items() if key != "system" or value}
        estimated = 0.0  # worst cases counted for attempts whose outcome is unknown
        last_error = ""
        for attempt in range(1, settings.max_attempts + 1):
            if self._spent_usd + worst_case > settings.budget_usd:
                if attempt > 1:
                    self._record(
                        request_hash,
                        "failed",
                        attempt - 1,
                        cost_usd=estimated,
                        estimated_usd=estimated,
                    )
                raise BudgetExceeded(
                    f"Claude budget: spent ${self._spent_usd:.4f} of the "
                    f"${settings.budget_usd:.4f} limit; refused call {request_hash[:12]} to "
                    f"{settings.model} (attempt {attempt}), whose worst case is ${worst_case:.4f}"
                )
            self.http_requests += 1
            try:
                message = self._sdk.messages.create(**kwargs)
                text, stop_reason, usage = _reply_fields(message)
            except anthropic.APIStatusError as err:
                last_error = f"HTTP {err.status_code}: {_error_text(err)}"
                if err.status_code not in RETRYABLE_STATUS:
                    raise self._failure(request_hash, estimated, attempt, last_error) from err
                wait = retry_after_seconds(err.response.headers)
            except anthropic.APITimeoutError:
                estimated += worst_case
                self._spent_usd += worst_case
                last_error = f"timed out after {settings.timeout_s} s"
                wait = None
            except anthropic.APIConnectionError as err:
                last_error = f"connection error: {err}"
                wait = None
            except (json.JSONDecodeError, _UnreadableReply) as err:
                estimated += worst_case
                self._spent_usd += worst_case
                last_error = f"unreadable 200 reply: {err}"
                raise self._failure(request_hash, estimated, attempt, last_error) from err
            else:
                cost = usage_cost(usage, self._price)
                self._spent_usd += cost
                reply = ClaudeReply(text, stop_reason, usage, cost, False, attempt, request_hash)
                self._cache_write(reply)
                self._record(
                    request_hash,
                    "ok",
                    attempt,
                    usage=usage,
                    cost_usd=cost + estimated,
                    estimated_usd=estimated,
                    stop_reason=stop_reason,
                )
                return reply
            if attempt < settings.max_attempts:
                if wait is None:
                    wait = backoff_seconds(
                        attempt, settings.backoff_base_s, settings.backoff_max_s, self._rng
                    )
                log.warning(
                    "Claude attempt %d/%d failed (%s); retrying in %.2f s",
                    attempt,
                    settings.max_attempts,
                    last_error,
                    wait,
                )
                self._sleep(wait)
        raise self._failure(
            request_hash, estimated, settings.max_attempts, last_error, gave_up=True
        )

    def _failure(
        self, request_hash: str, estimated: float, attempts: int, error: str, gave_up: bool = False
    ) -> ClaudeCallFailed:
        """Record a failed call in the ledger and build the exception that reports it."""
        self._record(request_hash, "failed", attempts, cost_usd=estimated, estimated_usd=estimated)
        why = f"gave up after {attempts} attempts" if gave_up else "non-retryable error"
        return ClaudeCallFailed(
            f"Claude call {request_hash[:12]} to {self.settings.model} failed ({why}); "
            f"last error: {error}"
        )

    def _cache_path(self, request_hash: str) -> Path | None:
        if self.settings.cache_dir is None:
            return None
        return Path(self.settings.cache_dir) / f"{request_hash}.json"

    def _cache_read(self, request_hash: str) -> ClaudeReply | None:
        path = self._cache_path(request_hash)
        if path is None or not path.exists():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            usage = TokenUsage(**entry["usage"])
            text, stop_reason = entry["text"], entry["stop_reason"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ClaudeCallFailed(
                f"cache entry {path} is unreadable ({err}); delete it to call the API again"
            ) from err
        return ClaudeReply(text, stop_reason, usage, 0.0, True, 0, request_hash)

    def _cache_write(self, reply: ClaudeReply) -> None:
        path = self._cache_path(reply.request_hash)
        if path is None:
            return
        entry = {
            "model": self.settings.model,
            "text": reply.text,
            "stop_reason": reply.stop_reason,
            "usage": asdict(reply.usage),
        }
        io.write_text(path, json.dumps(entry, ensure_ascii=False))

    def _record(
        self,
        request_hash: str,
        outcome: str,
        attempts: int,
        *,
        usage: TokenUsage | None = None,
        cost_usd: float = 0.0,
        estimated_usd: float = 0.0,
        stop_reason: str | None = None,
    ) -> None:
        """Append one fsync'd ledger line (outcome: ok | cached | failed); no prompt, no key."""
        line = {
            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "model": self.settings.model,
            "input_tokens": usage.input_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0,
            "cost_usd": round(cost_usd, 8),
            "estimated_usd": round(estimated_usd, 8),
            "request_hash": request_hash,
            "cached": outcome == "cached",
            "attempts": attempts,
            "outcome": outcome,
            "stop_reason": stop_reason,
        }
        path = Path(self.settings.ledger_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.calls += 1


def _error_text(err: anthropic.APIStatusError) -> str:
    """`<error type>: <message>` from an API error body, else the SDK's message."""
    body = err.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        detail = body["error"]
        return f"{detail.get('type', 'error')}: {detail.get('message', '')}"
    return str(err)
