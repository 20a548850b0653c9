"""Raw HTTP/1.1 for the connection tests: a request sent on its own socket (whole, in part or not
at all, as a stalling client sends it) and the reply read off it."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any

ERROR_KEYS = {"message", "type", "param", "code"}


def send(port: int, data: bytes, timeout_s: float = 60) -> socket.socket:
    """A new connection to 127.0.0.1:`port` with `data` sent on it."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    s.sendall(data)
    return s


def answer(s: socket.socket) -> tuple[int | None, dict[str, str], Any]:
    """The reply on `s` (status, lower-case headers, the JSON body), and `s` closed; (None, {}, b"")
    if the server closed the connection without one."""
    reply = http.client.HTTPResponse(s)
    try:
        reply.begin()
    except (http.client.RemoteDisconnected, ConnectionResetError):
        s.close()
        return None, {}, b""
    body = reply.read()
    s.close()
    return reply.status, {k.lower(): v for k, v in reply.getheaders()}, json.loads(body)


def request(
    method: str,
    path: str,
    body: bytes = b"",
    host: str = "127.0.0.1",
    length: int | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """A request's bytes; `length`: the Content-Length it declares (default: the body's)."""
    n = len(body) if length is None else length
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"Content-Length: {n}"] if body or length is not None else []
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def error_of(payload: Any) -> dict[str, Any]:
    """The OpenAI error object of a reply, asserting its shape."""
    assert isinstance(payload, dict) and set(payload) == {"error"}, payload
    assert set(payload["error"]) == ERROR_KEYS, payload
    return payload["error"]
