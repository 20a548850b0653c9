"""Prompt policy and beam search with Claude as the team and the reflector, through the real
`anthropic` client against the local Messages API server (tests/fake_anthropic.py), on the real code
environment and sandbox: retries, the ledger, cache hits on a rerun, the budget stop, no key written."""

from __future__ import annotations

import itertools
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from fake_anthropic import FakeAnthropicServer, Scripted, error_reply, message_reply

from orchestry.agents.base import SamplingSpec
from orchestry.agents.claude.agents import ClaudeAgents
from orchestry.agents.claude.client import BudgetExceeded, ClaudeClient, ClaudeSettings
from orchestry.algos.beam import BeamSettings, beam_search, best_of, search_rows
from orchestry.algos.prompt_policy import PromptPolicySettings, learn
from orchestry.envs.code.problems import load_problem_dir
from orchestry.params import Params, parse_params
from orchestry.stages.from_params import ClaudeJointJudge, beam_judge, make_env, spent_usd

API_KEY = f"sk-ant-test-{secrets.token_hex(16)}"
MODEL = "claude-haiku-4-5"
SAMPLING = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=64)
RULES = "aux: Name the helper aux and return its value.\nmain: Call aux and use what it returns."


def reply(body: dict[str, Any]) -> Scripted:
    """The reflector gets instructions, the judge a score; an agent gets a helper and an entry
    point that calls it."""
    if "coach a team" in str(body.get("system", "")):
        return message_reply(RULES, input_tokens=400, output_tokens=30)
    if is_judge(body):
        return message_reply(JUDGED, input_tokens=300, output_tokens=20)
    code = "```python\ndef aux(x):\n    return x\n\ndef main(x):\n    return aux(x)\n```"
    return message_reply(code, input_tokens=200, output_tokens=40)


JUDGED = '{"score": 0.75, "reason": "main calls aux and returns its value."}'


def is_judge(body: dict[str, Any]) -> bool:
    return "joint answer of a team" in str(body.get("system", ""))


def agents(server: FakeAnthropicServer, tmp_path: Path, budget: float = 5.0) -> ClaudeAgents:
    return ClaudeAgents(claude_client(server, tmp_path, budget), ["aux", "main", "reflector"])


def claude_client(server: FakeAnthropicServer, tmp_path: Path, budget: float = 5.0) -> ClaudeClient:
    a = Params().anthropic
    settings = ClaudeSettings(
        model=MODEL,
        max_tokens=a.max_tokens,
        base_url=server.base_url,
        timeout_s=5.0,
        max_attempts=a.max_attempts,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
        budget_usd=budget,
        prices={m: (p[0], p[1]) for m, p in a.prices.items()},
        cache_dir=str(tmp_path / "cache"),
        ledger_path=str(tmp_path / "api_ledger.jsonl"),
    )
    return ClaudeClient(settings, api_key=API_KEY, sleep=lambda s: None)


@pytest.fixture
def server():
    with FakeAnthropicServer(API_KEY) as fake:
        fake.default = reply
        yield fake


def env_and_tasks():
    return make_env(parse_params({})), load_problem_dir(ROOT / "data/coop")[:2]


def written(tmp_path: Path) -> str:
    return "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())


def test_prompt_policy_learns_with_claude_and_reruns_from_the_cache(server, tmp_path):
    env, tasks = env_and_tasks()
    settings = PromptPolicySettings(
        rounds=1, minibatch=1, samples=2, pareto_tasks=1, explore=0.0, max_rules=2, seed=0
    )
    server.enqueue(error_reply(529, "overloaded_error", "Overloaded"))  # the first call is retried
    team = agents(server, tmp_path)
    state = learn(team, team, env, tasks, settings, SAMPLING, SAMPLING)
    row = state.rounds[0]
    assert row["parsed"] == {
        "aux": "Name the helper aux and return its value.",
        "main": "Call aux and use what it returns.",
    }
    assert row["child_mean"] is not None and state.reflector_tokens == 30
    client = team.client
    # every call reached the server once (the first twice: the retry) or was a cache hit: a
    # question asked again in the run (the parent on a minibatch task that is also its Pareto task)
    assert client.http_requests == len(server.requests) <= client.calls + 1
    assert client.spent_usd > 0
    ledger = [json.loads(x) for x in (tmp_path / "api_ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == client.calls and ledger[0]["attempts"] == 2
    # a rerun asks the same questions: every one is a cache hit, nothing reaches the server
    sent = len(server.requests)
    again = agents(server, tmp_path)
    assert learn(again, again, env, tasks, settings, SAMPLING, SAMPLING).rounds == state.rounds
    assert len(server.requests) == sent and again.client.spent_usd == 0.0
    assert API_KEY not in written(tmp_path)


def test_beam_and_best_of_with_claude_stop_at_the_budget(server, tmp_path):
    env, tasks = env_and_tasks()
    settings = BeamSettings(width=2, k=2, turns=2, success=None, max_joint=4, seed=0)
    team = agents(server, tmp_path / "run")
    found = beam_search(team, env, tasks, settings, SAMPLING)
    assert [f.turns for f in found] == [2, 2] and all(f.completions == 12 for f in found)
    drawn = best_of(team, env, tasks, [6, 6], SAMPLING, 0)
    assert all(d.completions == 12 for d in drawn)
    assert team.client.calls == 48 and API_KEY not in written(tmp_path)
    poor = agents(server, tmp_path / "poor", budget=0.002)  # a few calls' worth
    with pytest.raises(BudgetExceeded):
        beam_search(poor, env, tasks, settings, SAMPLING)
    assert 0 < poor.client.spent_usd <= 0.002


def test_beam_with_the_claude_judge_ledger_cache_and_budget(server, tmp_path):
    env, tasks = env_and_tasks()
    params = parse_params({"beam": {"judge_weight": 0.5}})
    settings = BeamSettings(
        width=2, k=2, turns=2, success=None, max_joint=4, seed=0, judge_weight=0.5
    )
    team = agents(server, tmp_path / "run")
    judge = beam_judge(params, env, team, tmp_path / "run")
    assert isinstance(judge, ClaudeJointJudge) and judge.client is team.client  # one budget
    found = beam_search(team, env, tasks, settings, SAMPLING, judge)
    judged = [r for r in server.requests if is_judge(r.body)]
    shown = judged[0].body["messages"][0]["content"]
    assert tasks[0].prompt in shown and '<answer agent="main">' in shown
    # 12 candidates per task, each generated and judged; identical requests are cache hits
    shared = team.client
    ledger = [json.loads(x) for x in (tmp_path / "run/api_ledger.jsonl").read_text().splitlines()]
    assert shared.calls == len(ledger) == 24 + 24 and shared.spent_usd > 0
    assert spent_usd(team, judge) == shared.spent_usd  # the shared client counted once
    for f, row in zip(found, search_rows("beam", found, 0), strict=True):
        assert (f.judge, f.value) == (0.75, f.outcome.total + 0.5 * 0.75)
        assert row["search"]["judge"] == 0.75 and row["reward"]["total"] == f.outcome.total
    # a rerun asks the same questions: every one is a cache hit, nothing reaches the server
    sent = len(server.requests)
    again = agents(server, tmp_path / "run")
    rerun = beam_search(
        again, env, tasks, settings, SAMPLING, beam_judge(params, env, again, tmp_path)
    )
    assert [(f.actions, f.judge, f.value) for f in rerun] == [
        (f.actions, f.judge, f.value) for f in found
    ]
    assert len(server.requests) == sent and again.client.spent_usd == 0.0
    assert API_KEY not in written(tmp_path)
    # a judge of its own (a local team's) stops at its budget: each distinct answer is judged
    numbers = itertools.count()

    def varied(body: dict[str, Any]) -> Scripted:
        if is_judge(body):
            return reply(body)
        code = f"```python\ndef aux(x):\n    return x\n\ndef main(x):\n    return aux(x) + {next(numbers)}\n```"
        return message_reply(code, input_tokens=200, output_tokens=40)

    server.default = varied
    poor = ClaudeJointJudge(claude_client(server, tmp_path / "poor", budget=0.008), env)
    with pytest.raises(BudgetExceeded):
        beam_search(agents(server, tmp_path / "team"), env, tasks, settings, SAMPLING, poor)
    assert 0 < poor.client.spent_usd <= 0.008 and poor.client.calls >= 1
