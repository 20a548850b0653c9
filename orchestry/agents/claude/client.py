"""Claude through the Anthropic Messages API: one client with a hard budget, retries, cache, ledger.

Three features use it: `expert_edits` (per-agent suggestions for multi-turn feedback),
`judge_cooperation` (an optional cooperation score for the reward) and `ClaudeAgents` (Claude
models as the team's agents, with the same `generate` shape as the local policy).

Accounting. Before every HTTP attempt the client computes the worst case the attempt could cost:
an upper bound on the input tokens plus `max_tokens` output tokens. Claude's tokenizer is
byte-level, so a token covers at least one UTF-8 byte; the bound is the UTF-8 byte count of the
system prompt and the messages plus a fixed allowance for role markers (`worst_case_input_tokens`;
the count_tokens endpoint is not used, it would double the requests). If what was spent plus that
worst case exceeds `budget_usd`, the attempt is not made and `BudgetExceeded` is raised. After a
reply the actual cost from `usage` is added. An attempt whose outcome is unknown (a timeout, or a
200 reply whose body cannot be read) may still have been billed, so its worst case is counted as
spent and recorded as `estimated_usd` in the ledger; HTTP errors and refused connections cost
nothing.

Sampling. API version 2026-10-21, which anthropic SDK 2.x sends, has no sampling parameters
(temperature, top_p and top_k are rejected with a 400), so none are sent: replies are not
deterministic, and it is the cache that makes a rerun reproduce them.

Every call that reaches the API or the cache appends one fsync'd JSON line to the ledger (time,
model, token counts, cost, request hash, cached, attempts, outcome). The API key is read only from
ANTHROPIC_API_KEY (or passed explicitly) and is never written to the ledger, the cache or the
logs; prompts are not written to the ledger either.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anthropic

from orchestry import io
from orchestry.agents.base import Generation, GenRequest, SamplingSpec

log = logging.getLogger(__name__)
T = TypeVar("T")

API_KEY_ENV = "ANTHROPIC_API_KEY"

# $ per million tokens (input, output): list prices when this was written; override in settings.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-opus-4-1": (15.0, 75.0),
}
# Prompt-cache tokens are priced relative to the input price (5-minute cache writes, cache reads).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1
# Upper bound on the tokens the API adds per message and per request (role markers, framing).
TOKENS_PER_MESSAGE = 8
TOKENS_PER_REQUEST = 16
# HTTP statuses worth retrying: request timeout, rate limit, server errors (529 = overloaded).
RETRYABLE_STATUS = frozenset({408, 429}) | frozenset(range(500, 600))


@dataclass(frozen=True, kw_only=True)
class ClaudeSettings:
    """Everything the client needs; validated once when constructed."""

    model: str = "claude-sonnet-4-5"
    """Model id; must have an entry in `prices`."""
    max_tokens: int = 1024
    """Default output limit per call (also the output part of the worst-case cost)."""
    base_url: str | None = None
    """API endpoint; None = the SDK default."""
    timeout_s: float = 60.0
    """Per-attempt HTTP timeout."""
    max_attempts: int = 5
    """Total attempts per call on retryable errors."""
    backoff_base_s: float = 1.0
    """First backoff ceiling; doubles per attempt (full jitter); a retry-after header wins."""
    backoff_max_s: float = 30.0
    """Largest backoff ceiling."""
    budget_usd: float = 5.0
    """Hard spending limit for this client (one run)."""
    prices: Mapping[str, tuple[float, float]] = field(default_factory=lambda: dict(DEFAULT_PRICES))
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
class TokenUsage:
    """Token counts as the API reports them."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


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


def worst_case_input_tokens(system: str, messages: Sequence[Mapping[str, Any]]) -> int:
    """An upper bound on the input tokens of a request (one token per UTF-8 byte, plus framing)."""
    texts = [system] + [_content_text(m["content"]) for m in messages]
    framing = TOKENS_PER_REQUEST + TOKENS_PER_MESSAGE * len(messages)
    return framing + sum(len(text.encode()) for text in texts)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def usage_cost(usage: TokenUsage, price: tuple[float, float]) -> float:
    """Dollars for the given usage at (input $/Mtok, output $/Mtok)."""
    input_price, output_price = price
    input_equivalent = (
        usage.input_tokens
        + CACHE_WRITE_FACTOR * usage.cache_creation_input_tokens
        + CACHE_READ_FACTOR * usage.cache_read_input_tokens
    )
    return (input_equivalent * input_price + usage.output_tokens * output_price) / 1e6


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


# -------------------------------------------------------------------------------------------------
# Structured requests: a JSON reply checked against a schema, asked again once with the reason.


class OffSchema(ValueError):
    """A reply that is not the JSON object that was asked for; the message says why."""


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply that is only that object (optionally inside one ``` fence)."""
    body = text.strip()
    if body.startswith("```"):
        first_newline = body.find("\n")
        if first_newline < 0 or not body.endswith("```"):
            raise OffSchema("reply opens a code fence but does not close it")
        body = body[first_newline + 1 : -3].strip()

    def reject_constant(name: str) -> None:
        raise OffSchema(f"reply uses the non-JSON number {name}")

    try:
        value = json.loads(body, parse_constant=reject_constant)
    except json.JSONDecodeError as err:
        raise OffSchema(f"reply is not valid JSON ({err.msg} at char {err.pos})") from err
    if not isinstance(value, dict):
        raise OffSchema(f"reply is a JSON {type(value).__name__}, not an object")
    return value


def _ask_json(
    client: ClaudeClient, system: str, user_text: str, parse: Callable[[str], T], what: str
) -> T | None:
    """Ask once; if the reply is off-schema, ask once more saying why; then give up with None."""
    prompt = user_text
    for attempt in (1, 2):
        reply = client.complete(system, [{"role": "user", "content": prompt}])
        try:
            return parse(reply.text)
        except OffSchema as err:
            reason = str(err)
            if reply.stop_reason == "max_tokens":
                reason += " (the reply was cut at max_tokens)"
            log.warning("%s: off-schema reply on attempt %d: %s", what, attempt, reason)
            prompt = (
                f"{user_text}\n\nYour previous reply was rejected: {reason}. "
                "Reply again with only the JSON object described above."
            )
    log.warning("%s failed: two off-schema replies; no result for this request", what)
    return None


def _code_sections(code_by_agent: Mapping[str, str]) -> str:
    return "\n\n".join(
        f"Code written by agent {agent!r}:\n```python\n{code}\n```"
        for agent, code in code_by_agent.items()
    )


EXPERT_SYSTEM = (
    "You are an expert Python reviewer coaching a team of agents that write one program "
    "together: a helper agent writes an auxiliary function and the main agent writes the "
    "entry-point function, which may call it. You give each agent one concrete, actionable "
    "suggestion for editing its own code. You never write the full solution. You reply with a "
    "single JSON object and nothing else."
)


def expert_edits(
    client: ClaudeClient, problem_prompt: str, code_by_agent: dict[str, str], diagnostics: str
) -> dict[str, str] | None:
    """Edit suggestions {agent: suggestion} from Claude; None after two off-schema replies.

    API errors (`ClaudeCallFailed`, `BudgetExceeded`) propagate: they are not about the reply.
    """
    agents = list(code_by_agent)
    if not agents:
        raise ValueError("expert_edits needs the code of at least one agent")
    user_text = (
        f"Problem:\n{problem_prompt}\n\n{_code_sections(code_by_agent)}\n\n"
        f"Diagnostics from running the team's program and its tests:\n{diagnostics}\n\n"
        f"Reply with only a JSON object with exactly these keys: {json.dumps(agents)}. Each "
        "value is a string: your suggestion to that agent for editing its code."
    )

    def parse(text: str) -> dict[str, str]:
        value = parse_json_object(text)
        if set(value) != set(agents):
            raise OffSchema(f"keys {sorted(value)} are not exactly {sorted(agents)}")
        for agent, suggestion in value.items():
            if not isinstance(suggestion, str) or not suggestion.strip():
                raise OffSchema(f"the value for {agent!r} is not a non-empty string")
        return {agent: value[agent].strip() for agent in agents}

    return _ask_json(client, EXPERT_SYSTEM, user_text, parse, "expert_edits")


JUDGE_SYSTEM = (
    "You judge how well a team of agents cooperated on one program: a helper agent writes an "
    "auxiliary function and the main agent writes the entry-point function, which may call it. You "
    "judge the division of labour, not only correctness. You reply with a single JSON object and "
    "nothing else."
)


def judge_cooperation(
    client: ClaudeClient, problem_prompt: str, code_by_agent: dict[str, str]
) -> float | None:
    """Cooperation quality in [0, 1] from Claude; None after two off-schema/out-of-range replies.

    API errors (`ClaudeCallFailed`, `BudgetExceeded`) propagate; a score is never invented.
    """
    if not code_by_agent:
        raise ValueError("judge_cooperation needs the code of at least one agent")
    user_text = (
        f"Problem:\n{problem_prompt}\n\n{_code_sections(code_by_agent)}\n\n"
        "Score the cooperation from 0 to 1: 0 when the helper is missing, useless or ignored, or "
        "the main function duplicates its work; 1 when the helper does a meaningful, correct part "
        "of the task and the main function uses it correctly. Reply with only a JSON object "
        '{"score": <number from 0 to 1>, "reason": "<one sentence>"}.'
    )

    def parse(text: str) -> float:
        value = parse_json_object(text)
        if set(value) != {"score", "reason"}:
            raise OffSchema(f"keys {sorted(value)} are not exactly ['reason', 'score']")
        score, reason = value["score"], value["reason"]
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise OffSchema(f"score {score!r} is not a number")
        if not 0.0 <= score <= 1.0:
            raise OffSchema(f"score {score} is outside [0, 1]")
        if not isinstance(reason, str):
            raise OffSchema("reason is not a string")
        return float(score)

    return _ask_json(client, JUDGE_SYSTEM, user_text, parse, "judge_cooperation")


# -------------------------------------------------------------------------------------------------
# Claude models as the team's agents.


def split_system(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Chat messages -> (system prompt, user/assistant messages) as the Messages API wants them."""
    system = ""
    rest = list(messages)
    if rest and rest[0].get("role") == "system":
        system = rest.pop(0)["content"]
    for index, message in enumerate(rest):
        if message.get("role") not in ("user", "assistant"):
            raise ValueError(
                f"message {index} has role {message.get('role')!r}; after an optional leading "
                "system message only 'user' and 'assistant' are allowed"
            )
    if not rest or rest[0]["role"] != "user":
        raise ValueError("the Messages API needs at least one message, starting with 'user'")
    return system, [{"role": m["role"], "content": m["content"]} for m in rest]


class ClaudeAgents:
    """The team's agents played by a Claude model, with the local policy's `generate` shape."""

    def __init__(self, client: ClaudeClient, agents: Sequence[str]) -> None:
        if not agents or len(set(agents)) != len(agents):
            raise ValueError(f"agents must be a non-empty list of unique names, got {list(agents)}")
        self.client = client
        self.agents = tuple(agents)

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingSpec) -> list[Generation]:
        """n completions per request, one API call each (the API has no n); in request order.

        Only `sampling.max_new_tokens` applies: API version 2026-10-21 has no temperature, top_p
        or top_k, so the model samples with its own settings. The API gives no token ids:
        `token_ids` and `prompt_ids` are empty lists and `new_tokens` is the output token count
        from usage. Calls are sequential.
        """
        for request in requests:
            if request.agent not in self.agents:
                raise ValueError(f"unknown agent {request.agent!r}; agents are {list(self.agents)}")
            if request.n < 1:
                raise ValueError(f"request for {request.agent!r} asks for n={request.n} samples")
        generations = []
        for request in requests:
            system, messages = split_system(request.messages)
            start = time.perf_counter()
            replies = [
                self.client.complete(
                    system,
                    messages,
                    max_tokens=sampling.max_new_tokens,
                    sample_index=index,
                )
                for index in range(request.n)
            ]
            generations.append(
                Generation(
                    agent=request.agent,
                    texts=[reply.text for reply in replies],
                    token_ids=[],
                    prompt_ids=[],
                    seconds=time.perf_counter() - start,
                    new_tokens=sum(reply.usage.output_tokens for reply in replies),
                )
            )
        return generations
