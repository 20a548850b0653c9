"""The connection guard (orchestry/serve/transport.py) in front of a small app, in a uvicorn server
of this process with sub-second limits: the Host check, the read deadlines, the connection cap and
the shutdown, each answered in OpenAI's error shape. tests/serve/test_connections.py holds the same
against the real server process."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from raw_http import answer, error_of, request, send

from orchestry.serve.errors import add_error_handlers
from orchestry.serve.launch import free_port
from orchestry.serve.request_body import read_json
from orchestry.serve.transport import AllowedHosts, ConnectionLimits, server_for

LIMITS = ConnectionLimits(
    header_timeout_s=0.3,
    body_timeout_s=0.3,
    max_connections=4,
    keep_alive_s=0.5,
    shutdown_timeout_s=0.3,
    allowed_hosts=AllowedHosts.for_server("127.0.0.1", ["api.example.com"]),
)


def small_app() -> FastAPI:
    """A JSON echo (its body read as the server reads a chat request's), a slow answer, /health."""
    app = FastAPI()
    add_error_handlers(app)

    @app.post("/echo")
    async def echo(request: Request) -> Any:
        return await read_json(request, 10_000)

    @app.get("/slow")
    async def slow(s: float) -> dict:
        await asyncio.sleep(s)
        return {"slept": s}

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    return app


@pytest.fixture
def server() -> Iterator[tuple[int, Any, threading.Thread]]:
    """(port, uvicorn server, its thread); stopped (as by SIGTERM) after the test."""
    port = free_port()
    served = server_for(small_app(), "127.0.0.1", port, LIMITS)
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not served.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    yield port, served, thread
    served.should_exit = True
    thread.join(10)


def post(body: bytes, host: str = "127.0.0.1", length: int | None = None) -> bytes:
    return request("POST", "/echo", body, host, length)


def get(path: str, host: str = "127.0.0.1") -> bytes:
    return request("GET", path, host=host)


def test_the_allowed_hosts_are_loopback_the_bound_host_and_the_named_ones():
    local = AllowedHosts.for_server("127.0.0.1")
    assert all(map(local.allows, ["localhost", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST."]))
    assert not any(map(local.allows, ["evil.example", "10.0.0.2", "", None]))
    named = AllowedHosts.for_server("10.0.0.2", ["api.example.com", "*.corp.example"])
    assert all(map(named.allows, ["10.0.0.2:80", "api.example.com", "a.corp.example", "::1"]))
    assert not any(map(named.allows, ["corp.example", "example.com", "10.0.0.3"]))
    # listening on every address: any address passes (an address cannot be re-pointed), no name
    every = AllowedHosts.for_server("0.0.0.0")
    assert every.allows("192.168.1.5:8000") and every.allows("[fe80::1]")
    assert not every.allows("rebound.example:8000")
    assert AllowedHosts.for_server("127.0.0.1", ["*"]).allows("anything.example")


def test_limits_out_of_range_are_refused():
    for bad in ({"body_timeout_s": 0}, {"max_connections": 0}, {"shutdown_timeout_s": -1}):
        with pytest.raises(ValueError, match="--max-connections"):
            ConnectionLimits(**bad)


def test_a_bad_host_gets_400_and_a_named_one_passes(server):
    port = server[0]
    status, headers, payload = answer(send(port, get("/health", "rebound.example:8000")))
    assert status == 400 and error_of(payload)["code"] == "invalid_host", payload
    assert headers["connection"] == "close"
    assert answer(send(port, get("/health", "api.example.com")))[0] == 200
    no_host = answer(send(port, b"GET /health HTTP/1.0\r\n\r\n"))
    assert no_host[0] == 400 and "no Host header" in error_of(no_host[2])["message"]


def test_a_stalled_body_gets_408_in_time_and_the_others_are_answered(server):
    port = server[0]
    start = time.monotonic()
    stalled = [send(port, post(b'{"a": ', length=100)) for _ in range(2)]
    assert answer(send(port, post(b'{"a": 1}')))[2] == {"a": 1}  # not held up by them
    for s in stalled:
        status, _, payload = answer(s)
        assert status == 408 and error_of(payload)["code"] == "request_timeout", payload
        assert "--body-timeout-s" in error_of(payload)["message"]
    assert 0.25 < time.monotonic() - start < 3


def test_a_stalled_head_gets_408_and_a_silent_connection_is_closed(server):
    port = server[0]
    start = time.monotonic()
    head, silent = send(port, b"POST /echo HTTP/1.1\r\nHost: 127."), send(port, b"")
    status, _, payload = answer(head)
    assert status == 408 and "--header-timeout-s" in error_of(payload)["message"], payload
    assert silent.recv(100) == b""  # closed, nothing said
    assert 0.25 < time.monotonic() - start < 3


def test_over_the_connection_cap_a_request_gets_503_and_health_still_answers(server):
    port = server[0]
    held = [send(port, b"") for _ in range(4)]
    time.sleep(0.1)
    status, headers, payload = answer(send(port, get("/slow?s=0")))
    assert status == 503 and error_of(payload)["code"] == "server_overloaded", payload
    assert headers["retry-after"] == "1"
    assert answer(send(port, get("/health")))[0] == 200
    for s in held:
        s.close()
    time.sleep(0.1)
    assert answer(send(port, get("/slow?s=0")))[0] == 200


def test_a_shutdown_answers_what_it_accepted_and_503_to_the_rest_in_bounded_time(server):
    port, served, thread = server
    stalled = send(port, post(b'{"a": ', length=100))
    quick, late = send(port, get("/slow?s=0.2")), send(port, get("/slow?s=30"))
    time.sleep(0.1)
    start = time.monotonic()
    served.should_exit = True  # what SIGTERM does
    status, _, payload = answer(stalled)
    assert status == 503 and "body had not all arrived" in error_of(payload)["message"], payload
    status, _, payload = answer(quick)
    assert status == 200 and payload == {"slept": 0.2}
    status, _, payload = answer(late)
    assert status == 503 and "--shutdown-timeout-s" in error_of(payload)["message"], payload
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - start < 2.5
