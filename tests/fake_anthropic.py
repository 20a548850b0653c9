"""A local HTTP server that speaks enough of the Anthropic Messages API for the client tests.

Only ``POST /v1/messages`` is served. Replies are scripted per test: each request takes the next
queued :class:`Scripted` reply, or, when the queue is empty, the server's ``default`` responder.
Requests are validated the way the real API validates the fields our client sends (a bad request
gets a 400 ``invalid_request_error``), and every request is recorded for assertions.

The server binds to 127.0.0.1 on an ephemeral port, runs in a daemon thread and stops within a
bounded time: scripted delays wait on an event that :meth:`FakeAnthropicServer.stop` sets.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_VERSION_HEADER = "anthropic-version"


@dataclass(frozen=True)
class Scripted:
    """One HTTP reply: status, body (a dict is sent as JSON, bytes as they are), headers, delay."""

    status: int = 200
    body: dict[str, Any] | bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass(frozen=True)
class RecordedRequest:
    """What the server saw: path, headers (lower-case names) and the decoded JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


_message_ids = itertools.count(1)


def message_reply(
    text: str,
    input_tokens: int = 10,
    output_tokens: int = 5,
    stop_reason: str = "end_turn",
    model: str = "claude-sonnet-4-5",
) -> Scripted:
    """A successful Messages API reply with one text block and the given usage."""
    body = {
        "id": f"msg_fake_{next(_message_ids):06d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }
    return Scripted(status=200, body=body)


def error_reply(
    status: int, error_type: str, message: str, retry_after: str | None = None
) -> Scripted:
    """An API error reply in the real error-body shape, optionally with a ``retry-after`` header."""
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    return Scripted(status=status, body=body, headers=headers)


SAMPLING_FIELDS = ("temperature", "top_p", "top_k")
LEGACY_API_VERSION = "2023-06-01"


def _request_problem(body: Any, api_version: str) -> str | None:
    """The reason the real API would reject this request body, or None if it is acceptable."""
    if not isinstance(body, dict):
        return "body must be a JSON object"
    if api_version != LEGACY_API_VERSION:
        # API version 2026-10-21 removed the sampling parameters, even at their default values.
        for name in SAMPLING_FIELDS:
            if name in body:
                return f"{name}: Extra inputs are not permitted"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: must be an integer >= 1"
    if "system" in body and not isinstance(body["system"], str | list):
        return "system: must be a string or a list of text blocks"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: must be 'user' or 'assistant'"
        if not isinstance(message.get("content"), str | list):
            return f"messages.{index}.content: must be a string or a list of blocks"
    if messages[0]["role"] != "user":
        return "messages.0.role: the first message must use the 'user' role"
    return None


class FakeAnthropicServer:
    """Scripted Messages API server on 127.0.0.1; use as a context manager or start()/stop()."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self.default: Callable[[dict[str, Any]], Scripted] | None = None
        self._queue: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """The URL to pass as the SDK's ``base_url``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def enqueue(self, *replies: Scripted) -> None:
        """Queue replies; each request takes the next one in order."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """How many queued replies have not been used yet."""
        with self._lock:
            return len(self._queue)

    def start(self) -> FakeAnthropicServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _next_reply(self, body: dict[str, Any]) -> Scripted:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self.default is not None:
            return self.default(body)
        return error_reply(500, "api_error", "fake server: no scripted reply left for this request")

    def _respond(self, path: str, headers: dict[str, str], raw: bytes) -> Scripted:
        if path != "/v1/messages":
            return error_reply(
                404, "not_found_error", f"fake server serves only /v1/messages: {path}"
            )
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            return error_reply(400, "invalid_request_error", "request body is not valid JSON")
        with self._lock:
            self.requests.append(RecordedRequest(path=path, headers=headers, body=body))
        # SDK versions differ: older ones send x-api-key, 2.x sends Authorization: Bearer.
        keys = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
        if self.api_key not in keys:
            return error_reply(401, "authentication_error", "invalid x-api-key")
        if API_VERSION_HEADER not in headers:
            return error_reply(400, "invalid_request_error", "anthropic-version header is required")
        problem = _request_problem(body, headers[API_VERSION_HEADER])
        if problem is not None:
            return error_reply(400, "invalid_request_error", problem)
        return self._next_reply(body)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                path = self.path.split("?", 1)[0]
                reply = server._respond(path, headers, raw)
                if reply.delay_s > 0 and server._stopping.wait(reply.delay_s):
                    return
                payload = (
                    json.dumps(reply.body).encode() if isinstance(reply.body, dict) else reply.body
                )
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up (a timeout test); nothing is left to tell it.
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        return Handler
