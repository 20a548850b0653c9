"""Claude's story judge (`critics.judge_story`) against the local Messages API server
(tests/fake_anthropic.py), through the real `anthropic` SDK; sleeps between retries are recorded."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_anthropic import FakeAnthropicServer, error_reply, message_reply

from orchestry.agents.claude.client import BudgetExceeded, ClaudeClient, ClaudeSettings
from orchestry.agents.claude.critics import judge_story
from orchestry.envs.story.tasks import load_judge_prompt
from orchestry.params import Params

API_KEY = f"sk-ant-test-{secrets.token_hex(16)}"
MODEL = "claude-haiku-4-5"
THEME = "A lighthouse keeper must keep the light burning through the worst storm in years."
STORY = (
    "Mira kept the lighthouse. {Braces} stay as written.\n\n"
    "A storm broke the lamp, and Mira fixed it. The boats came home safe."
)


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(API_KEY) as fake:
        yield fake


@pytest.fixture
def template() -> str:
    return load_judge_prompt(Path(__file__).resolve().parents[2] / "data" / "story")


def client(server: FakeAnthropicServer, tmp_path: Path, **overrides: Any) -> ClaudeClient:
    defaults = Params().anthropic
    fields: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": defaults.max_tokens,
        "timeout_s": 5.0,
        "max_attempts": defaults.max_attempts,
        "budget_usd": defaults.budget_usd,
        "prices": {m: (p[0], p[1]) for m, p in defaults.prices.items()},
        "base_url": server.base_url,
        "ledger_path": str(tmp_path / "api_ledger.jsonl"),
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
        **overrides,
    }
    return ClaudeClient(ClaudeSettings(**fields), api_key=API_KEY, sleep=lambda s: None)


def test_a_valid_reply_gives_the_score(server, tmp_path, template):
    server.enqueue(message_reply('{"score": 0.8, "reason": "complete and coherent"}'))

    assert judge_story(client(server, tmp_path), template, THEME, STORY) == 0.8

    [request] = server.requests
    prompt = request.body["messages"][0]["content"]
    assert THEME in prompt and STORY in prompt  # the story's braces are left alone
    assert "{theme}" not in prompt and "{story}" not in prompt
    assert '{"score"' in prompt  # the reply format the parser checks


def test_two_off_schema_replies_give_none(server, tmp_path, template):
    server.enqueue(
        message_reply("A lovely story! I would give it an 8."),
        message_reply('{"score": 8, "reason": "good"}'),
    )
    judge_client = client(server, tmp_path)

    assert judge_story(judge_client, template, THEME, STORY) is None

    assert len(server.requests) == 2 and judge_client.calls == 2
    retry = server.requests[1].body["messages"][0]["content"]
    assert "rejected: reply is not valid JSON" in retry


@pytest.mark.parametrize(
    "failure",
    [
        error_reply(529, "overloaded_error", "Overloaded"),
        error_reply(500, "api_error", "Internal server error"),
    ],
)
def test_server_errors_are_retried(server, tmp_path, template, failure):
    server.enqueue(failure, message_reply('{"score": 0.5, "reason": "fine"}'))

    assert judge_story(client(server, tmp_path), template, THEME, STORY) == 0.5

    assert len(server.requests) == 2


def test_the_budget_stops_the_judge(server, tmp_path, template):
    with pytest.raises(BudgetExceeded):
        judge_story(client(server, tmp_path, budget_usd=1e-9), template, THEME, STORY)

    assert server.requests == []


def test_a_cache_hit_makes_no_second_request(server, tmp_path, template):
    server.enqueue(message_reply('{"score": 0.6, "reason": "ok"}'))
    cache = str(tmp_path / "cache")

    first = judge_story(client(server, tmp_path, cache_dir=cache), template, THEME, STORY)
    again = judge_story(client(server, tmp_path, cache_dir=cache), template, THEME, STORY)

    assert first == again == 0.6
    assert len(server.requests) == 1


def test_a_template_without_its_placeholders_is_refused(server, tmp_path):
    with pytest.raises(ValueError, match=r"no \{story\} placeholder"):
        judge_story(client(server, tmp_path), "Judge {theme}.", THEME, STORY)
    assert server.requests == []
