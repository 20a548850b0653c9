"""The Claude client against a local Messages API server, through the real `anthropic` SDK.

The server (tests/fake_anthropic.py) runs on 127.0.0.1 for each test and replies from a script, so
every path (retries, timeouts, unreadable bodies, budget, cache, schema checks) is exercised over
real HTTP. Sleeps between retries are recorded, not slept, so the suite stays fast.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import sampling
from fake_anthropic import FakeAnthropicServer, Scripted, error_reply, message_reply

from orchestry.agents.base import GenRequest
from orchestry.agents.claude.agents import ClaudeAgents
from orchestry.agents.claude.client import (
    BudgetExceeded,
    ClaudeCallFailed,
    ClaudeClient,
    ClaudeSettings,
    MissingApiKey,
)
from orchestry.agents.claude.critics import (
    OffSchema,
    expert_edits,
    judge_cooperation,
    judge_joint,
    parse_json_object,
)
from orchestry.agents.claude.pricing import TokenUsage, usage_cost, worst_case_input_tokens
from orchestry.agents.claude.retry import retry_after_seconds
from orchestry.params import Params

API_KEY = f"sk-ant-test-{secrets.token_hex(16)}"
MODEL = "claude-haiku-4-5"  # the default claude-sonnet-4-5 makes the SDK warn of its end of life
PRICE = (1.0, 5.0)  # $/Mtok of MODEL in the default params' anthropic.prices
# The client settings the default params give (the values' one home is orchestry/params/schema.py).
_DEFAULTS = Params().anthropic
SETTINGS: dict[str, Any] = {
    "model": _DEFAULTS.model,
    "max_tokens": _DEFAULTS.max_tokens,
    "timeout_s": _DEFAULTS.timeout_s,
    "max_attempts": _DEFAULTS.max_attempts,
    "budget_usd": _DEFAULTS.budget_usd,
    "prices": {m: (p[0], p[1]) for m, p in _DEFAULTS.prices.items()},
}
SYSTEM = "You are terse."
MESSAGES = [{"role": "user", "content": "Say hello."}]
CODE = {"aux": "def aux(x):\n    return x * 2", "main": "def main(x):\n    return aux(x) + 1"}


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(API_KEY) as fake:
        yield fake


class Harness:
    """Builds clients on the fake server with recorded sleeps and paths under tmp_path."""

    def __init__(self, server: FakeAnthropicServer, tmp_path: Path) -> None:
        self.server = server
        self.ledger = tmp_path / "results" / "stage" / "api_ledger.jsonl"
        self.cache = tmp_path / "cache" / "claude"
        self.sleeps: list[float] = []

    def client(self, **overrides: Any) -> ClaudeClient:
        fields: dict[str, Any] = {
            **SETTINGS,
            "model": MODEL,
            "base_url": self.server.base_url,
            "ledger_path": str(self.ledger),
            "timeout_s": 5.0,
            "backoff_base_s": 0.01,
            "backoff_max_s": 0.05,
            **overrides,
        }
        return ClaudeClient(ClaudeSettings(**fields), api_key=API_KEY, sleep=self.sleeps.append)

    def ledger_lines(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]


@pytest.fixture
def harness(server: FakeAnthropicServer, tmp_path: Path) -> Harness:
    return Harness(server, tmp_path)


def worst_case(system: str, messages: list[dict[str, Any]], max_tokens: int) -> float:
    return usage_cost(TokenUsage(worst_case_input_tokens(system, messages), max_tokens), PRICE)


def test_normal_reply_is_costed_and_ledgered(harness: Harness) -> None:
    harness.server.enqueue(message_reply("Hello.", input_tokens=12, output_tokens=7))
    client = harness.client()

    reply = client.complete(SYSTEM, MESSAGES)

    assert reply.text == "Hello."
    assert reply.stop_reason == "end_turn"
    assert reply.usage == TokenUsage(input_tokens=12, output_tokens=7)
    assert reply.cost_usd == pytest.approx((12 * 1.0 + 7 * 5.0) / 1e6)
    assert (reply.cached, reply.attempts) == (False, 1)
    assert client.spent_usd == pytest.approx(reply.cost_usd)
    assert (client.calls, client.http_requests) == (1, 1)
    sent = harness.server.requests[0].body
    assert sent == {
        "model": MODEL,
        "system": SYSTEM,
        "messages": MESSAGES,
        "max_tokens": 1024,
    }
    [line] = harness.ledger_lines()
    assert line["input_tokens"] == 12 and line["output_tokens"] == 7
    assert line["cost_usd"] == pytest.approx(reply.cost_usd)
    assert line["request_hash"] == reply.request_hash and len(reply.request_hash) == 64
    assert (line["cached"], line["attempts"], line["outcome"]) == (False, 1, "ok")
    assert {"time", "model", "estimated_usd", "stop_reason"} <= set(line)
    ledger_text = harness.ledger.read_text()
    assert "Say hello." not in ledger_text and SYSTEM not in ledger_text


def test_rate_limit_waits_as_long_as_retry_after_says(harness: Harness) -> None:
    harness.server.enqueue(
        error_reply(429, "rate_limit_error", "slow down", retry_after="2"),
        message_reply("ok"),
    )
    reply = harness.client().complete(SYSTEM, MESSAGES)

    assert reply.text == "ok" and reply.attempts == 2
    assert harness.sleeps == [2.0]
    assert len(harness.server.requests) == 2
    assert harness.ledger_lines()[0]["attempts"] == 2


def test_overloaded_without_retry_after_backs_off_with_jitter(harness: Harness) -> None:
    harness.server.enqueue(
        error_reply(529, "overloaded_error", "Overloaded"),
        error_reply(529, "overloaded_error", "Overloaded"),
        message_reply("ok"),
    )
    reply = harness.client(backoff_base_s=0.01, backoff_max_s=0.015).complete(SYSTEM, MESSAGES)

    assert reply.attempts == 3
    assert len(harness.sleeps) == 2
    assert 0.0 <= harness.sleeps[0] <= 0.01  # ceiling base * 2**0
    assert 0.0 <= harness.sleeps[1] <= 0.015  # base * 2**1 capped at backoff_max_s


def test_server_errors_until_the_attempt_limit(harness: Harness) -> None:
    harness.server.default = lambda body: error_reply(500, "api_error", "Internal server error")
    client = harness.client(max_attempts=3)

    with pytest.raises(ClaudeCallFailed, match=r"3 attempts.*HTTP 500: api_error"):
        client.complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 3
    assert len(harness.sleeps) == 2  # no sleep after the last attempt
    assert client.spent_usd == 0.0
    [line] = harness.ledger_lines()
    assert (line["outcome"], line["attempts"], line["cost_usd"]) == ("failed", 3, 0.0)


def test_client_error_is_not_retried(harness: Harness) -> None:
    harness.server.enqueue(error_reply(400, "invalid_request_error", "prompt is too long"))

    with pytest.raises(ClaudeCallFailed, match="non-retryable.*HTTP 400.*prompt is too long"):
        harness.client().complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 1 and harness.sleeps == []


def test_refused_connection_is_retried_then_fails(harness: Harness) -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = harness.client(base_url=f"http://127.0.0.1:{port}", max_attempts=2)

    with pytest.raises(ClaudeCallFailed, match="2 attempts.*connection error"):
        client.complete(SYSTEM, MESSAGES)

    assert client.http_requests == 2 and len(harness.sleeps) == 1
    assert client.spent_usd == 0.0


def test_timeout_is_retried_and_its_worst_case_counted(harness: Harness) -> None:
    harness.server.enqueue(
        Scripted(delay_s=5.0, body=message_reply("too late").body),
        message_reply("in time", input_tokens=10, output_tokens=5),
    )
    client = harness.client(timeout_s=0.3, max_tokens=100)

    reply = client.complete(SYSTEM, MESSAGES)

    assert reply.text == "in time" and reply.attempts == 2
    assert len(harness.server.requests) == 2
    # The timed-out attempt may have been billed: its worst case counts against the budget.
    timed_out = worst_case(SYSTEM, MESSAGES, 100)
    assert client.spent_usd == pytest.approx(timed_out + reply.cost_usd)
    [line] = harness.ledger_lines()
    assert line["estimated_usd"] == pytest.approx(timed_out)
    assert line["cost_usd"] == pytest.approx(timed_out + reply.cost_usd)


def test_timeouts_until_the_attempt_limit(harness: Harness) -> None:
    harness.server.default = lambda body: Scripted(delay_s=5.0, body=message_reply("x").body)

    with pytest.raises(ClaudeCallFailed, match="2 attempts.*timed out after 0.2 s"):
        harness.client(timeout_s=0.2, max_attempts=2).complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 2


@pytest.mark.parametrize(
    "body", [b'{"type": "message", "content": [', {"type": "message", "role": "assistant"}]
)
def test_unreadable_reply_body_fails_at_once(harness: Harness, body: dict | bytes) -> None:
    harness.server.enqueue(Scripted(status=200, body=body))
    client = harness.client(max_tokens=50)

    with pytest.raises(ClaudeCallFailed, match="non-retryable.*unreadable 200 reply"):
        client.complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 1
    assert client.spent_usd == pytest.approx(worst_case(SYSTEM, MESSAGES, 50))
    assert harness.ledger_lines()[0]["outcome"] == "failed"


def test_budget_refuses_the_call_that_could_exceed_it(harness: Harness) -> None:
    harness.server.default = lambda body: message_reply("ok", input_tokens=100, output_tokens=50)
    per_call = usage_cost(TokenUsage(100, 50), PRICE)
    worst = worst_case(SYSTEM, MESSAGES, 200)
    assert worst > per_call
    budget = 2 * per_call + worst + per_call / 2  # room for exactly three calls
    client = harness.client(max_tokens=200, budget_usd=budget)

    for _ in range(3):
        client.complete(SYSTEM, MESSAGES)
    with pytest.raises(BudgetExceeded, match=r"spent \$0\.001\d of the \$0\.0019 limit; refused"):
        client.complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 3  # the refused call made no request
    assert len(harness.ledger_lines()) == client.calls == 3
    assert client.spent_usd == pytest.approx(3 * per_call)
    assert client.spent_usd <= budget


def test_budget_is_checked_before_every_retry(harness: Harness) -> None:
    harness.server.enqueue(Scripted(delay_s=5.0, body=message_reply("too late").body))
    worst = worst_case(SYSTEM, MESSAGES, 100)
    client = harness.client(timeout_s=0.3, max_tokens=100, budget_usd=1.5 * worst)

    with pytest.raises(BudgetExceeded, match=r"\(attempt 2\)"):
        client.complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 1
    assert client.spent_usd == pytest.approx(worst) and client.spent_usd <= 1.5 * worst
    [line] = harness.ledger_lines()
    assert (line["outcome"], line["attempts"]) == ("failed", 1)
    assert line["cost_usd"] == pytest.approx(worst)


def test_cache_hit_makes_no_request_and_costs_nothing(harness: Harness) -> None:
    harness.server.enqueue(message_reply("cached text", input_tokens=9, output_tokens=4))
    first = harness.client(cache_dir=str(harness.cache)).complete(SYSTEM, MESSAGES)
    fresh = harness.client(cache_dir=str(harness.cache))  # a later run reading the same cache

    again = fresh.complete(SYSTEM, MESSAGES)

    assert len(harness.server.requests) == 1
    assert (again.text, again.usage, again.cached, again.cost_usd) == (
        "cached text",
        first.usage,
        True,
        0.0,
    )
    assert fresh.spent_usd == 0.0 and fresh.http_requests == 0
    assert [p.name for p in harness.cache.iterdir()] == [f"{first.request_hash}.json"]
    assert [line["cached"] for line in harness.ledger_lines()] == [False, True]
    # Anything else in the request is a different entry.
    harness.server.enqueue(message_reply("other"))
    assert fresh.complete(SYSTEM, MESSAGES, max_tokens=10).text == "other"
    assert len(harness.server.requests) == 2


def test_the_key_is_in_no_written_file_nor_log(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    harness.server.enqueue(
        message_reply("a"),
        error_reply(429, "rate_limit_error", "slow", retry_after="0"),
        message_reply('{"aux": "use a set", "main": "call aux"}'),
        error_reply(401, "authentication_error", "invalid x-api-key"),
    )
    client = harness.client(cache_dir=str(harness.cache))
    client.complete(SYSTEM, MESSAGES)
    assert expert_edits(client, "Double then add one.", CODE, "all tests passed") is not None
    with pytest.raises(ClaudeCallFailed):
        client.complete(SYSTEM, [{"role": "user", "content": "another"}])

    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(written) >= 3  # ledger and two cache entries
    for path in written:
        assert API_KEY.encode() not in path.read_bytes(), path
    assert API_KEY not in caplog.text
    sent = harness.server.requests[0].headers
    assert API_KEY in sent.get("authorization", "") + sent.get("x-api-key", "")  # it was sent


def test_missing_key_is_a_clear_error(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = ClaudeSettings(
        **{**SETTINGS, "model": MODEL},
        base_url=harness.server.base_url,
        ledger_path=str(harness.ledger),
    )
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingApiKey, match="ANTHROPIC_API_KEY is not set"):
        ClaudeClient(settings)

    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    harness.server.enqueue(message_reply("from env"))
    assert ClaudeClient(settings).complete(SYSTEM, MESSAGES).text == "from env"


def test_settings_reject_an_unpriced_model(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'claude-x' has no price.*add it to prices"):
        ClaudeSettings(**{**SETTINGS, "model": "claude-x"}, ledger_path=str(tmp_path / "l.jsonl"))


def test_expert_edits_returns_one_suggestion_per_agent(harness: Harness) -> None:
    harness.server.enqueue(
        message_reply('```json\n{"aux": "Handle x = 0.", "main": "Call aux once."}\n```')
    )
    edits = expert_edits(harness.client(), "Double then add one.", CODE, "test_zero failed")

    assert edits == {"aux": "Handle x = 0.", "main": "Call aux once."}
    prompt = harness.server.requests[0].body["messages"][0]["content"]
    assert "def aux(x)" in prompt and "test_zero failed" in prompt and '["aux", "main"]' in prompt


def test_expert_edits_asks_again_once_then_gives_none(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.server.enqueue(
        message_reply("Sure! Here are my suggestions: make it faster."),
        message_reply('{"aux": "Handle x = 0."}'),  # `main` missing
    )
    client = harness.client()

    assert expert_edits(client, "Double then add one.", CODE, "test_zero failed") is None

    assert len(harness.server.requests) == 2 and client.calls == 2
    retry_prompt = harness.server.requests[1].body["messages"][0]["content"]
    assert "rejected: reply is not valid JSON" in retry_prompt
    assert "expert_edits failed" in caplog.text


def test_expert_edits_recovers_on_the_second_reply(harness: Harness) -> None:
    harness.server.enqueue(
        message_reply('{"aux": "ok", "main": 3}'),
        message_reply('{"aux": "ok", "main": "Use aux."}'),
    )
    assert expert_edits(harness.client(), "p", CODE, "d") == {"aux": "ok", "main": "Use aux."}
    assert len(harness.server.requests) == 2


def test_judge_gives_the_score(harness: Harness) -> None:
    harness.server.enqueue(message_reply('{"score": 0.75, "reason": "main uses aux."}'))
    assert judge_cooperation(harness.client(), "Double then add one.", CODE) == 0.75


def test_judge_never_invents_a_score(harness: Harness) -> None:
    harness.server.enqueue(
        message_reply('{"score": 1.5, "reason": "excellent"}'),
        message_reply('{"score": "high", "reason": "excellent"}'),
    )
    client = harness.client()

    assert judge_cooperation(client, "Double then add one.", CODE) is None

    assert len(harness.server.requests) == 2 and client.calls == 2
    retry_prompt = harness.server.requests[1].body["messages"][0]["content"]
    assert "score 1.5 is outside [0, 1]" in retry_prompt


def test_joint_judge_scores_the_answers_together(harness: Harness) -> None:
    harness.server.enqueue(
        message_reply('{"score": 0.9}'),
        message_reply('{"score": 0.25, "reason": "main ignores aux."}'),
        message_reply("great"),
        message_reply('{"score": -1, "reason": "no"}'),
    )
    client = harness.client()

    assert judge_joint(client, "Double then add one.", {**CODE, "main": "  "}) == 0.25
    asked = harness.server.requests[0].body
    assert "joint answer of a team" in asked["system"]
    shown = asked["messages"][0]["content"]
    assert shown.startswith("<task>\nDouble then add one.\n</task>")
    assert f'<answer agent="aux">\n{CODE["aux"]}\n</answer>' in shown
    assert '<answer agent="main">\n(empty)\n</answer>' in shown
    assert "rejected: keys ['score']" in harness.server.requests[1].body["messages"][0]["content"]
    assert judge_joint(client, "Double then add one.", CODE) is None  # never invented
    with pytest.raises(ValueError, match="at least one agent"):
        judge_joint(client, "t", {})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"score": NaN, "reason": "r"}', "non-JSON number NaN"),
        ("[0.5]", "not an object"),
        ('```json\n{"score": 0.5', "does not close"),
    ],
)
def test_parse_json_object_rejects(text: str, reason: str) -> None:
    with pytest.raises(OffSchema, match=reason):
        parse_json_object(text)


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"retry-after": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "soon"}) is None
    future = retry_after_seconds({"retry-after": "Fri, 01 Jan 2100 00:00:00 GMT"})
    assert future is not None and future > 1e9


def test_claude_agents_generate_n_texts_per_request(harness: Harness) -> None:
    counter = iter(range(100))

    def reply(body: dict[str, Any]) -> Scripted:
        number = next(counter)
        return message_reply(f"def f():\n    return {number}", output_tokens=3 + number)

    harness.server.default = reply
    agents = ClaudeAgents(harness.client(), ["aux", "main"])
    requests = [
        GenRequest(
            agent="aux",
            messages=[{"role": "system", "content": "Write aux."}, MESSAGES[0]],
            n=3,
        ),
        GenRequest(agent="main", messages=list(MESSAGES), n=2),
    ]

    generations = agents.generate(requests, sampling(temperature=0.7, max_new_tokens=64))

    assert [g.agent for g in generations] == ["aux", "main"]
    assert [len(g.texts) for g in generations] == [3, 2]
    assert len({text for g in generations for text in g.texts}) == 5
    assert [g.new_tokens for g in generations] == [3 + 4 + 5, 6 + 7]
    for generation in generations:
        assert generation.token_ids == [] and generation.prompt_ids == []
        assert generation.seconds >= 0 and not math.isnan(generation.seconds)
    bodies = [r.body for r in harness.server.requests]
    assert len(bodies) == 5
    assert [b.get("system") for b in bodies] == ["Write aux."] * 3 + [None] * 2
    assert {b["max_tokens"] for b in bodies} == {64}
    # API 2026-10-21 has no sampling parameters; the fake server would answer 400 to any of them.
    assert not any({"temperature", "top_p", "top_k"} & set(b) for b in bodies)


def test_claude_agents_reject_bad_requests_before_calling(harness: Harness) -> None:
    agents = ClaudeAgents(harness.client(), ["aux", "main"])
    with pytest.raises(ValueError, match="unknown agent 'helper'"):
        agents.generate([GenRequest(agent="helper", messages=MESSAGES, n=1)], sampling())
    with pytest.raises(ValueError, match="starting with 'user'"):
        agents.generate(
            [GenRequest(agent="aux", messages=[{"role": "system", "content": "x"}], n=1)],
            sampling(),
        )
    assert harness.server.requests == []
