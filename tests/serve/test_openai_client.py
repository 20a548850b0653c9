"""The OpenAI surface of issue 58 against the real server on the embedded model, through the
official `openai` client: /v1/completions (plain text, several prompts, echo, stop, seed),
token-by-token streaming of chat and completions (chunks as the tokens come, usage, [DONE]),
client tools answered as `tool_calls` and the conversation that answers them, and every bad
completions or tools request a 4xx in OpenAI's shape. The server runs the team's own tools
(`--server-tools`, env.tools on): it started, so the box's probe passed."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
from conftest import ROOT
from openai import OpenAI
from serve_fixtures import served
from xdist_marks import one_process

pytestmark = [pytest.mark.slow, one_process(__name__)]  # a real model generates in every test here

TOOLS_ON = {
    "tools": {
        "enabled": True,
        "names": ["python", "calculator", "examples"],
        "max_calls": 2,
        "max_result_chars": 400,
    }
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
COUNT = [{"role": "user", "content": "Count: one, two,"}]
TASK = 'def add_three(x):\n    """Return x plus 3."""\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("openai")
    flags = ["--max-tokens-limit", "64", "--server-tools"]
    with served(root, flags, params={"env": TOOLS_ON}) as (url, log):
        yield url, root


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    return OpenAI(base_url=f"{server[0]}/v1", api_key="x", max_retries=0, timeout=300)


def timed(stream) -> list[tuple[float, Any]]:
    """Each chunk of a stream with the second it arrived (from the first)."""
    start = time.perf_counter()
    return [(time.perf_counter() - start, chunk) for chunk in stream]


# ------------------------------------------------------------------------- /v1/completions


def test_completions_continue_plain_text_one_choice_per_prompt(client):
    prompts = ["def add(a, b):\n    return", "The capital of France is"]
    reply = client.completions.create(model="main", prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in reply.choices] == [0, 1]
    assert all(c.text and c.finish_reason in ("stop", "length") for c in reply.choices)
    assert reply.usage.prompt_tokens < 20  # the prompts alone: no chat template around them
    assert 2 <= reply.usage.completion_tokens <= 12
    alone = client.completions.create(model="main", prompt=prompts[1], max_tokens=6, temperature=0)
    assert alone.choices[0].text == reply.choices[1].text
    echoed = client.completions.create(
        model="main", prompt=prompts[1], max_tokens=6, temperature=0, echo=True
    )
    assert echoed.choices[0].text == prompts[1] + alone.choices[0].text


def test_completions_honour_stop_and_seed(client):
    prompt = "Count: one, two, three, four,"
    whole = client.completions.create(model="aux", prompt=prompt, max_tokens=12, temperature=0)
    text = whole.choices[0].text
    stop = text[3:5]
    assert len(text) > 5 and stop.strip(), text
    cut = client.completions.create(
        model="aux", prompt=prompt, max_tokens=12, temperature=0, stop=[stop, "@@"]
    )
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    a, b = (
        client.completions.create(model="main", prompt="Name a colour:", seed=3, max_tokens=6)
        for _ in range(2)
    )
    assert a.choices[0].text == b.choices[0].text


def test_the_team_answers_chat_only(client):
    with pytest.raises(openai.BadRequestError, match=r"answers chat only"):
        client.completions.create(model="team", prompt=TASK, max_tokens=4)


# ------------------------------------------------------------------------- streaming


def test_a_chat_stream_sends_tokens_as_they_come_then_finish_usage_and_done(client):
    """Issue 58: the stream once came whole after the generation; now each token's text is sent
    as it is generated, well before the last."""
    chunks = timed(
        client.chat.completions.create(
            model="main",
            messages=COUNT,
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    content = [(t, c.choices[0].delta.content) for t, c in chunks if c.choices]
    content = [(t, text) for t, text in content if text]
    assert len(content) >= 2, chunks
    assert content[-1][0] - content[0][0] > 0.3, "every chunk came at once, after the generation"
    finish = [c.choices[0].finish_reason for _, c in chunks if c.choices]
    assert finish[-1] == "length" and set(finish[:-1]) == {None}
    usage = chunks[-1][1]
    assert usage.choices == [] and usage.usage.completion_tokens == 24
    whole = client.chat.completions.create(
        model="main", messages=COUNT, max_tokens=24, temperature=0
    )
    assert "".join(text for _, text in content) == whole.choices[0].message.content


def test_a_streamed_stop_string_is_never_sent(client):
    whole = (
        client.chat.completions.create(model="main", messages=COUNT, max_tokens=16, temperature=0)
        .choices[0]
        .message.content
    )
    stop = whole[6:9]
    assert len(whole) > 9 and stop.strip(), whole
    chunks = list(
        client.chat.completions.create(
            model="main", messages=COUNT, max_tokens=16, temperature=0, stop=stop, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole[: whole.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_completions_stream_sends_each_prompt_its_own_chunks(client):
    prompts = ["One, two, three,", "Monday, Tuesday,"]
    chunks = timed(
        client.completions.create(
            model="main",
            prompt=prompts,
            max_tokens=10,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    whole = client.completions.create(model="main", prompt=prompts, max_tokens=10, temperature=0)
    for i in (0, 1):
        mine = [c.choices[0] for _, c in chunks if c.choices and c.choices[0].index == i]
        assert len([c for c in mine if c.text]) >= 2
        assert "".join(c.text for c in mine) == whole.choices[i].text
        assert mine[-1].finish_reason == "length"
    times = [t for t, c in chunks if c.choices and c.choices[0].text]
    assert times[-1] - times[0] > 0.2, "every chunk came at once, after the generation"
    assert chunks[-1][1].usage.completion_tokens == 20 and chunks[-1][1].choices == []


# ------------------------------------------------------------------------- tools


def test_a_named_tool_comes_back_as_tool_calls_and_its_result_is_read(client):
    reply = client.chat.completions.create(
        model="main",
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=12,
        temperature=0,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}
    answered = client.chat.completions.create(
        model="main",
        messages=[
            *ASK_WEATHER,
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
        ],
        tools=[WEATHER],
        max_tokens=12,
        temperature=0,
    )
    assert answered.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answered.usage.prompt_tokens > reply.usage.prompt_tokens


def test_a_streamed_tool_call_comes_as_a_tool_calls_delta(client):
    chunks = list(
        client.chat.completions.create(
            model="main",
            messages=ASK_WEATHER,
            tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=12,
            temperature=0,
            stream=True,
        )
    )
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert len(calls) == 1 and calls[0][0].function.name == "get_weather"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tools_offered_but_not_called_leave_a_plain_answer(client):
    reply = client.chat.completions.create(
        model="main", messages=COUNT, tools=[WEATHER], max_tokens=8, temperature=0
    )
    choice = reply.choices[0]
    assert choice.message.tool_calls is None and choice.message.content
    assert choice.finish_reason in ("stop", "length")


def test_the_team_runs_its_own_tools_only_in_the_box_and_answers(server, client):
    reply = client.chat.completions.create(
        model="team", messages=[{"role": "user", "content": TASK}], max_tokens=24, seed=1
    )
    actions = reply.model_extra["orchestry"]["actions"]
    assert set(actions) == {"aux", "main"}
    parts = [c.strip() for c in (actions["aux"], actions["main"]) if c.strip()]
    assert reply.choices[0].message.content == "\n\n\n".join(parts) + "\n"
    assert reply.usage.completion_tokens > 0


# ------------------------------------------------------------------------- bad requests


def call(url: str, body: dict[str, Any], path: str) -> tuple[int, Any]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def prompt(**fields: Any) -> dict[str, Any]:
    return {"model": "main", "prompt": "Say hi.", "max_tokens": 1, **fields}


BAD_COMPLETIONS = [  # (id, body, status, param)
    ("prompt-missing", {"model": "main"}, 400, "prompt"),
    ("prompt-a-number", prompt(prompt=5), 400, "prompt"),
    ("prompt-token-ids", prompt(prompt=[1, 2, 3]), 400, "prompt"),
    ("prompt-token-id-lists", prompt(prompt=[[1, 2], [3]]), 400, "prompt"),
    ("prompt-empty", prompt(prompt=""), 400, "prompt"),
    ("prompt-empty-list", prompt(prompt=[]), 400, "prompt"),
    ("prompt-mixed-list", prompt(prompt=["a", 1]), 400, "prompt"),
    ("prompt-17", prompt(prompt=["a"] * 17), 400, "prompt"),
    ("prompt-one-token", prompt(prompt="Hi"), 400, "prompt"),
    ("prompt-over-context", prompt(prompt=" a" * 8300, max_tokens=8), 400, "prompt"),
    ("max-tokens-over-limit", prompt(max_tokens=1000), 400, "max_tokens"),
    ("n-2", prompt(n=2), 400, "n"),
    ("echo-a-string", prompt(echo="yes"), 400, "echo"),
    ("suffix", prompt(suffix="!"), 400, "suffix"),
    ("logprobs", prompt(logprobs=2), 400, "logprobs"),
    ("best-of", prompt(best_of=2), 400, "best_of"),
    ("logit-bias", prompt(logit_bias={"42": -100}), 400, "logit_bias"),
    ("presence-penalty", prompt(presence_penalty=1), 400, "presence_penalty"),
    ("frequency-penalty", prompt(frequency_penalty=1), 400, "frequency_penalty"),
    ("user", prompt(user="bob"), 400, "user"),
    ("messages", prompt(messages=[{"role": "user", "content": "hi"}]), 400, "messages"),
    ("top-k", prompt(top_k=5), 400, "top_k"),
    ("stream-options-alone", prompt(stream_options={"include_usage": True}), 400, "stream_options"),
    ("stop-five", prompt(stop=list("abcde")), 400, "stop"),
    ("team", prompt(model="team"), 400, "model"),
    ("unknown-model", prompt(model="gpt-4"), 404, "model"),
]
BAD_CHAT_TOOLS = [
    ("tools-to-team", {"model": "team", "messages": [{"role": "user", "content": TASK}]}, "tools"),
    ("tool-choice-required", {"tool_choice": "required"}, "tool_choice"),
    (
        "tool-answer-unknown-call",
        {"messages": [*ASK_WEATHER, {"role": "tool", "tool_call_id": "x", "content": "1"}]},
        "messages.1.tool_call_id",
    ),
]


def error_of(payload: Any) -> dict[str, Any]:
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    assert set(payload["error"]) == {"message", "type", "param", "code"}, payload
    return payload["error"]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [b[1:] for b in BAD_COMPLETIONS],
    ids=[b[0] for b in BAD_COMPLETIONS],
)
def test_a_bad_completions_request_gets_a_4xx_in_openai_shape(server, body, status, param):
    got, payload = call(server[0], body, "/v1/completions")
    assert got == status, payload
    assert error_of(payload)["param"] == param
    assert len(json.dumps(payload)) < 600


@pytest.mark.parametrize(
    ("changes", "param"), [b[1:] for b in BAD_CHAT_TOOLS], ids=[b[0] for b in BAD_CHAT_TOOLS]
)
def test_a_bad_tools_request_gets_a_400_in_openai_shape(server, changes, param):
    body = {"model": "main", "messages": ASK_WEATHER, "tools": [WEATHER], **changes}
    got, payload = call(server[0], body, "/v1/chat/completions")
    assert got == 400, payload
    assert error_of(payload)["param"] == param


def test_the_prompt_over_the_context_names_both_numbers(server):
    _, payload = call(server[0], prompt(prompt=" a" * 8300, max_tokens=8), "/v1/completions")
    message = error_of(payload)["message"]
    assert "prompt tokens + max_tokens 8" in message and "8192" in message, message


def test_completions_are_counted_in_the_metrics(server, client):
    client.completions.create(model="aux", prompt="Hi there", max_tokens=1)
    with urllib.request.urlopen(f"{server[0]}/metrics") as r:
        metrics = r.read().decode()
    assert 'orchestry_requests_total{model="aux",status="200"}' in metrics
    assert 'orchestry_requests_total{model="main",status="400"}' in metrics


# ------------------------------------------------------------------------- --server-tools


def serve_cli(root, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m orchestry serve` on the module's adapters, up to its start checks."""
    return subprocess.run(
        [sys.executable, "-m", "orchestry", "serve", "--params", str(root / "params.yaml")]
        + ["--adapters", str(root / "adapters"), *flags],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
        timeout=120,
    )


def test_the_team_tools_run_only_with_the_flag_and_only_isolated(server):
    root = server[1]
    unflagged = serve_cli(root, "--port", "1")
    assert unflagged.returncode == 1 and "start the server with --server-tools" in (
        unflagged.stderr
    ), unflagged.stderr
    unboxed = serve_cli(root, "--server-tools", "--port", "1", env={"PATH": "/nonexistent"})
    assert unboxed.returncode == 1, unboxed.stderr
    assert "--server-tools: the tools cannot be isolated here: `unshare`" in unboxed.stderr
