"""Hostile clients against the real server (issue 58): each bad request, across JSON, encodings,
types, ranges, unsupported OpenAI fields, routes, methods and keys, gets a 4xx in OpenAI's error
shape, and the server answers a good request right after; one bad request never fails the ones
batched with it; unknown model names stay out of the metrics; bodies over the limit are refused
before they are read."""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import ROOT, tiny_params
from xdist_marks import one_process

from orchestry.params import load_params
from orchestry.serve.launch import server_process
from orchestry.stages.from_params import make_policy

pytestmark = one_process(__name__)

pytestmark = pytest.mark.slow  # a real model generates in every test here

KEY = "hostile-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TASK = 'def add_three(x):\n    """Return x plus 3."""\n'
ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    """One server for the module, its API key from the environment (ORCHESTRY_API_KEY)."""
    root = tmp_path_factory.mktemp("hostile")
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    make_policy(load_params(params)).save_adapters(root / "adapters")
    flags = ["--max-tokens-limit", "8", "--batch-wait-ms", "100"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ORCHESTRY_API_KEY", KEY)
        with server_process(
            params, root / "adapters", flags, root / "server.log", torch_threads=1
        ) as url:
            yield url


def call(
    url: str,
    body: bytes | dict | None = None,
    method: str = "POST",
    path: str = "/v1/chat/completions",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """One raw HTTP request; (status, lower-cased headers, the JSON body or the raw bytes)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    sent = {"Content-Type": "application/json", **(AUTH if headers is None else headers)}
    try:
        conn.request(method, path, body=data, headers=sent)
        reply = conn.getresponse()
        raw = reply.read()
    finally:
        conn.close()
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = raw
    return reply.status, {k.lower(): v for k, v in reply.getheaders()}, payload


def ok(**fields: Any) -> dict[str, Any]:
    """A good request (greedy, 1 token), with `fields` changed."""
    body = {"model": "main", "messages": [{"role": "user", "content": "Say hi."}]}
    return {**body, "max_tokens": 1, "temperature": 0, **fields}


def said(content: Any, role: str = "user", **fields: Any) -> dict[str, Any]:
    return ok(messages=[{"role": role, "content": content}], **fields)


def error_of(payload: Any) -> dict[str, Any]:
    """The OpenAI error object of a reply, asserting its shape."""
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    error = payload["error"]
    assert set(error) == ERROR_KEYS, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    return error


def assert_healthy(url: str) -> None:
    status, _, payload = call(url, ok())
    assert status == 200, payload
    assert isinstance(payload["choices"][0]["message"]["content"], str)
    with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
        assert json.load(r)["status"] == "ok"


DEEP = b"[" * 100_000 + b"]" * 100_000
NESTED: Any = "x"
for _ in range(200):
    NESTED = {"a": NESTED}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

# (id, body, status, param); param "-": any (None or a field, never a byte offset)
BAD_BODIES = [
    # JSON and encodings
    ("truncated-json", b'{"model": "main",', 400, None),
    ("not-json", b"hello", 400, None),
    ("empty-body", b"", 400, None),
    ("array-body", b"[]", 400, None),
    ("null-body", b"null", 400, None),
    ("string-body", b'"main"', 400, None),
    (
        "invalid-utf8",
        b'{"model": "main", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
        400,
        None,
    ),
    ("utf16-body", json.dumps(ok()).encode("utf-16"), 400, None),
    ("deep-nesting", DEEP, 400, None),
    ("nan", json.dumps(ok(temperature=float("nan"))).encode(), 400, "-"),
    ("infinity", json.dumps(ok(top_p=float("inf"))).encode(), 400, "-"),
    ("lone-surrogate", said("a\ud800b"), 400, "messages.0.content"),
    ("lone-surrogate-model", ok(model="m\udfff"), 400, "model"),
    ("lone-surrogate-key", {**ok(), "x\ud800": 1}, 400, "-"),
    ("deep-field", ok(metadata=NESTED), 400, "-"),
    # shapes and types
    ("missing-model", {"messages": [{"role": "user", "content": "hi"}]}, 400, "model"),
    ("missing-messages", {"model": "main"}, 400, "messages"),
    ("empty-messages", ok(messages=[]), 400, "messages"),
    ("messages-a-string", ok(messages="hi"), 400, "messages"),
    ("message-a-string", ok(messages=["hi"]), 400, "messages.0"),
    ("bad-role", said("hi", role="robot"), 400, "messages.0.role"),
    ("tool-without-call", said("hi", role="tool"), 400, "messages.0.tool_call_id"),
    ("content-a-number", said(5), 400, "messages.0.content"),
    ("content-missing", ok(messages=[{"role": "user"}]), 400, "messages.0.content"),
    (
        "image-part",
        said([{"type": "image_url", "image_url": {"url": "http://x"}}]),
        400,
        "messages.0.content",
    ),
    ("text-part-no-text", said([{"type": "text"}]), 400, "messages.0.content"),
    (
        "message-name",
        ok(messages=[{"role": "user", "content": "hi", "name": "bob"}]),
        400,
        "messages.0.name",
    ),
    ("model-a-number", ok(model=5), 400, "model"),
    ("model-empty", ok(model=""), 400, "model"),
    # ranges
    ("temperature-a-string", ok(temperature="hot"), 400, "temperature"),
    ("temperature-high", ok(temperature=5), 400, "temperature"),
    ("temperature-negative", ok(temperature=-1), 400, "temperature"),
    ("top-p-zero", ok(top_p=0), 400, "top_p"),
    ("max-tokens-zero", ok(max_tokens=0), 400, "max_tokens"),
    ("max-tokens-over-limit", ok(max_tokens=1000), 400, "max_tokens"),
    ("max-tokens-a-float", ok(max_tokens=2.5), 400, "max_tokens"),
    (
        "max-completion-tokens-over",
        ok(max_tokens=None, max_completion_tokens=99),
        400,
        "max_completion_tokens",
    ),
    ("n-2", ok(n=2), 400, "n"),
    ("stream-a-string", ok(stream="yes"), 400, "stream"),
    ("seed-a-string", ok(seed="x"), 400, "seed"),
    ("seed-huge", ok(seed=2**70), 400, "seed"),
    ("stop-a-number", ok(stop=5), 400, "stop"),
    ("stop-five", ok(stop=["a", "b", "c", "d", "e"]), 400, "stop"),
    ("stop-empty", ok(stop=[""]), 400, "stop"),
    ("team-without-def", said("Write me a poem.", model="team"), 400, "messages"),
    ("team-with-stop", said(TASK, model="team", stop=["x"]), 400, "stop"),
    (
        "stream-options-without-stream",
        ok(stream_options={"include_usage": True}),
        400,
        "stream_options",
    ),
    ("stream-options-unknown", ok(stream=True, stream_options={"x": 1}), 400, "stream_options.x"),
    # OpenAI fields the server does not honour: a 400, never silence
    ("tools-to-the-team", said(TASK, model="team", tools=[TOOL]), 400, "tools"),
    ("tool-choice-without-tools", ok(tool_choice="auto"), 400, "tool_choice"),
    ("tool-choice-required", ok(tools=[TOOL], tool_choice="required"), 400, "tool_choice"),
    ("functions", ok(functions=[TOOL["function"]]), 400, "functions"),
    ("logprobs", ok(logprobs=True), 400, "logprobs"),
    ("top-logprobs", ok(top_logprobs=3), 400, "top_logprobs"),
    ("response-format", ok(response_format={"type": "json_object"}), 400, "response_format"),
    ("logit-bias", ok(logit_bias={"42": -100}), 400, "logit_bias"),
    ("presence-penalty", ok(presence_penalty=1.0), 400, "presence_penalty"),
    ("frequency-penalty", ok(frequency_penalty=1.0), 400, "frequency_penalty"),
    ("user", ok(user="bob"), 400, "user"),
    ("unknown-field", ok(colour="red"), 400, "colour"),
    ("long-unknown-field", {**ok(), "k" * 5000: 1}, 400, "-"),
]


@pytest.mark.parametrize(
    ("body", "status", "param"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES]
)
def test_a_bad_body_gets_a_4xx_in_openai_shape_and_the_server_stays_healthy(
    server, body, status, param
):
    got, _, payload = call(server, body)
    assert got == status, payload
    error = error_of(payload)
    if param != "-":
        assert error["param"] == param, error
    assert not re.fullmatch(r"\d+", str(error["param"])), f"param is a byte offset: {error}"
    assert len(json.dumps(payload)) < 600, "the error echoes too much of the request"
    assert_healthy(server)


BAD_CALLS = [  # (id, method, path, headers, status)
    ("unknown-route", "GET", "/v1/nope", AUTH, 404),
    ("unknown-route-post", "POST", "/v2/chat/completions", AUTH, 404),
    ("long-unknown-route", "GET", "/v1/" + "x" * 4000, AUTH, 404),
    ("get-chat", "GET", "/v1/chat/completions", AUTH, 405),
    ("put-chat", "PUT", "/v1/chat/completions", AUTH, 405),
    ("delete-models", "DELETE", "/v1/models", AUTH, 405),
    ("no-key", "POST", "/v1/chat/completions", {}, 401),
    ("wrong-key", "POST", "/v1/chat/completions", {"Authorization": "Bearer nope"}, 401),
    ("key-without-bearer", "POST", "/v1/chat/completions", {"Authorization": KEY}, 401),
    ("basic-auth", "POST", "/v1/chat/completions", {"Authorization": "Basic dTpw"}, 401),
    ("models-without-key", "GET", "/v1/models", {}, 401),
    ("unknown-v1-route-without-key", "GET", "/v1/nope", {}, 401),
]


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [c[1:] for c in BAD_CALLS],
    ids=[c[0] for c in BAD_CALLS],
)
def test_a_bad_route_method_or_key_gets_a_4xx_in_openai_shape(
    server, method, path, headers, status
):
    body = ok() if method in ("POST", "PUT") else None
    got, head, payload = call(server, body, method, path, headers)
    assert got == status, payload
    error_of(payload)
    assert len(json.dumps(payload)) < 600, "the error echoes too much of the request"
    if status == 405:
        assert "allow" in head
    assert_healthy(server)


def test_unsupported_fields_pass_unset_or_at_their_no_op_value(server):
    """Clients that send OpenAI's defaults keep working: null, `logprobs: false`, penalties 0."""
    body = ok(tools=None, logprobs=False, presence_penalty=0, frequency_penalty=0.0, user=None)
    body["messages"] = [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "text", "text": "Say hi."}]},
    ]
    status, _, payload = call(server, body)
    assert status == 200, payload
    assert payload["usage"]["completion_tokens"] == 1


def test_the_key_opens_the_v1_routes_and_health_and_metrics_need_none(server):
    status, _, payload = call(server, None, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in payload["data"]] == ["team", "aux", "main"]
    for path in ("/health", "/metrics"):
        status, _, _ = call(server, None, "GET", path, headers={})
        assert status == 200, path


def test_one_bad_request_does_not_fail_its_batch(server):
    """Finding 1: a lone surrogate (valid JSON) once broke the tokenizer for its whole batch."""
    bodies = [said(f"Give me a number bigger than {i}.", max_tokens=2) for i in range(6)]
    bodies.insert(3, said("a\ud800b", max_tokens=2))
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = list(pool.map(lambda b: call(server, b), bodies))
    bad = replies.pop(3)
    assert bad[0] == 400 and error_of(bad[2])["param"] == "messages.0.content", bad
    assert [r[0] for r in replies] == [200] * 6, replies


def test_a_prompt_over_the_context_is_refused_naming_both_numbers(server):
    """Finding 2: prompt tokens + max_tokens over the model's context (8,192 tokens)."""
    status, _, payload = call(server, said(" a" * 8300, max_tokens=8))
    assert status == 400, payload
    error = error_of(payload)
    assert error["param"] == "messages"
    prompt = re.search(r"(\d+) prompt tokens", error["message"])
    assert prompt and int(prompt.group(1)) > 8184, error
    assert "max_tokens 8" in error["message"] and "8192" in error["message"], error
    assert_healthy(server)


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    """Finding 2: a declared 2 MB body gets 413 without the server waiting for it."""
    parts = urlsplit(server)
    with socket.create_connection((parts.hostname, parts.port), timeout=15) as s:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
            "Content-Length: 2000000\r\n\r\n"
        )
        s.sendall(head.encode())  # and no body: the answer must not wait for it
        reply = http.client.HTTPResponse(s)
        reply.begin()
        payload = json.loads(reply.read())
    assert reply.status == 413, payload
    error_of(payload)
    assert_healthy(server)


def test_a_chunked_body_over_the_limit_is_refused(server):
    """Finding 2: without a declared length, the body is counted as it comes (1 MiB default)."""
    chunk = b"x" * 65536
    body = iter([b'{"model": "main", "messages": [{"role": "user", "content": "'] + [chunk] * 20)
    parts = urlsplit(server)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=AUTH, encode_chunked=True)
        reply = conn.getresponse()
        payload = json.loads(reply.read())
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the server closed the connection without a 413")
    finally:
        conn.close()
    assert reply.status == 413, payload
    error_of(payload)
    assert_healthy(server)


def test_unknown_model_names_stay_out_of_the_metrics_and_the_errors(server):
    """Finding 3: a client-chosen name is no metric label and is echoed only as a short prefix."""
    before = call(server, None, "GET", "/metrics", headers={})[2]
    names = [secrets.token_hex(2048) for _ in range(20)]
    for name in names:
        status, _, payload = call(server, ok(model=name))
        assert status == 404, payload
        error = error_of(payload)
        assert error["param"] == "model" and len(error["message"]) < 400, error
    after = call(server, None, "GET", "/metrics", headers={})[2]
    assert not any(name[:16].encode() in after for name in names)
    assert len(after) - len(before) < 2000, "unknown names grew the metrics"


def serve_cli(
    params, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m orchestry serve` with no adapters: it exits before loading the model."""
    clean = {k: v for k, v in os.environ.items() if k != "ORCHESTRY_API_KEY"}
    return subprocess.run(
        [sys.executable, "-m", "orchestry", "serve", "--params", str(params)]
        + ["--adapters", str(params.parent / "missing"), *flags],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        cwd=ROOT,
        timeout=120,
    )


def test_a_non_loopback_bind_without_a_key_warns(tmp_path):
    """Finding 8: binding 0.0.0.0 without --api-key / ORCHESTRY_API_KEY logs a warning."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    start = time.monotonic()
    warned = serve_cli(params, "--host", "0.0.0.0")
    assert warned.returncode == 1 and "without an API key" in warned.stderr, warned.stderr
    for flags, env in [
        (["--host", "0.0.0.0", "--api-key", "k"], None),
        (["--host", "0.0.0.0"], {"ORCHESTRY_API_KEY": "k"}),
        (["--host", "127.0.0.1"], None),
        (["--host", "localhost"], None),
    ]:
        quiet = serve_cli(params, *flags, env=env)
        assert quiet.returncode == 1 and "without an API key" not in quiet.stderr, quiet.stderr
    assert time.monotonic() - start < 120
