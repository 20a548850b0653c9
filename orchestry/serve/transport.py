"""The server's connections: how long a client may take to send a request, how many connections
are served at once, which Host names are answered, and how long a shutdown waits.

uvicorn holds a connection as long as its client wants: one that sends part of a request and
stalls is held forever, and a SIGTERM waits for it. Here, between the socket and the app:

- a request's head must arrive within `header_timeout_s` of the connection opening or the previous
  response ending, its body within `body_timeout_s` of its head; past either, the client gets
  408 if some of its request came and no answer has begun (the app sees the client gone), and
  the connection is closed;
- past `max_connections` open connections a request gets 503 (`/health` and `/metrics` are still
  answered, for probes and scrapers), with `Retry-After`;
- a request whose Host header names no allowed host gets 400: a web page whose name an attacker
  points at this machine (DNS rebinding) cannot use the model through a visitor's browser;
- an idle keep-alive connection closes after `keep_alive_s`;
- on SIGTERM or Ctrl-C the server stops accepting connections, closes the idle ones, answers 503
  to requests whose body is still coming, answers the requests it accepted (body read) for at
  most `shutdown_timeout_s` and 503 to those still waiting then; then the app's own shutdown waits
  for the generate call under way as long again at most, and exits without it.

Every refusal is OpenAI's error object (`errors.py`). The deadlines and the shutdown live in a
subclass of uvicorn's h11 protocol (`GuardedH11Protocol`), the Host check and the cap in an ASGI
layer in front of the app (`ConnectionGuard`).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestry.serve.auth import OPEN_PATHS
from orchestry.serve.errors import RequestError, clip, error_body

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
"""Always allowed: a browser sends these only for a page served from this machine itself."""
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class AllowedHosts:
    """The Host header names a request may carry (the port aside)."""

    names: frozenset[str] = LOOPBACK_NAMES
    """Names and addresses, lower case; `*.example.com` allows every name under example.com."""
    any_address: bool = False
    """Whether any IP address passes: the server listens on every address, and an address
    cannot be re-pointed as a name can (DNS rebinding needs a name)."""
    anything: bool = False
    """`--allowed-hosts '*'`: no check."""

    @classmethod
    def for_server(cls, bind: str, given: Sequence[str] = ()) -> AllowedHosts:
        """The loopback names, the bound host (any address when bound to all of them) and
        `given` (`*`: any host)."""
        names = {_host_name(n) for n in given if n.strip()}
        anything = "*" in names
        wildcard = bind.strip() in _WILDCARD_BINDS
        if not wildcard:
            names.add(_host_name(bind))
        return cls(frozenset(LOOPBACK_NAMES | names - {"*"}), wildcard, anything)

    def allows(self, host: str | None) -> bool:
        """Whether a request with this Host header (None: none) is answered."""
        if self.anything:
            return True
        if not host:
            return False
        name = _host_name(host)
        if name in self.names:
            return True
        if any(n.startswith("*.") and name.endswith(n[1:]) for n in self.names):
            return True
        if self.any_address:
            try:
                ipaddress.ip_address(name)
                return True
            except ValueError:
                return False
        return False


def _host_name(host: str) -> str:
    """`host` without its port, brackets or trailing dot, lower case: `[::1]:8000` -> `::1`."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.split(":")[0]
    return host.rstrip(".")


@dataclass(frozen=True)
class ConnectionLimits:
    """How the server holds its connections (the serve command's flags)."""

    header_timeout_s: float = 10.0
    """A request's head must arrive within this (--header-timeout-s)."""
    body_timeout_s: float = 30.0
    """A request's body must arrive within this of its head (--body-timeout-s)."""
    max_connections: int = 512
    """Most connections answered at once; a request on one more gets 503 (--max-connections)."""
    keep_alive_s: float = 5.0
    """An idle keep-alive connection closes after this (--keep-alive-s)."""
    shutdown_timeout_s: float = 20.0
    """On SIGTERM, how long accepted requests may still take (--shutdown-timeout-s)."""
    allowed_hosts: AllowedHosts = field(default_factory=AllowedHosts)
    """The Host names answered (--allowed-hosts)."""
    retry_after_s: int = 1
    """What a 503 tells the client to wait (its Retry-After header)."""

    def __post_init__(self) -> None:
        timeouts = (self.header_timeout_s, self.body_timeout_s, self.keep_alive_s)
        if min(timeouts) <= 0 or self.shutdown_timeout_s < 0 or self.max_connections < 1:
            raise ValueError(
                "--header-timeout-s, --body-timeout-s and --keep-alive-s must be over 0, "
                f"--shutdown-timeout-s at least 0 and --max-connections at least 1: {self}"
            )


class ConnectionGuard:
    """The ASGI app in front of the API: the Host check, the connection cap and the answer to a
    request still unanswered when the shutdown's time is up. Its protocol
    (`GuardedH11Protocol`) counts the open connections here and says when the server stops."""

    def __init__(self, app: Any, limits: ConnectionLimits) -> None:
        self.app, self.limits = app, limits
        self.connections = 0
        """Open connections (the protocol counts them)."""
        self.stopping = False
        """Whether the server is shutting down (the protocol says so)."""

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # the lifespan
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal.response()(scope, receive, send)
            return
        started = False

        async def send_noting_start(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_noting_start)
        except asyncio.CancelledError:
            # uvicorn cancels what is still unanswered --shutdown-timeout-s after a SIGTERM;
            # answered here, the task ends at once (re-raised, uvicorn would log a traceback
            # and send a bare 500)
            if started or not self.stopping:
                raise
            late = RequestError(
                503,
                "the server is shutting down: this request was not answered within "
                f"--shutdown-timeout-s ({self.limits.shutdown_timeout_s:g} s)",
                "server_error",
                headers={"Connection": "close"},
            )
            await late.response()(scope, receive, send)

    def _refusal(self, scope: dict) -> RequestError | None:
        host = next((v for k, v in scope["headers"] if k == b"host"), None)
        text = host.decode("latin-1") if host is not None else None
        if not self.limits.allowed_hosts.allows(text):
            what = f"Host {clip(text)!r}" if text else "no Host header"
            return RequestError(
                400,
                f"{what}: this server answers only the names it was started with; start it with "
                "--allowed-hosts naming the host clients use",
                code="invalid_host",
                headers={"Connection": "close"},
            )
        if self.connections > self.limits.max_connections and scope["path"] not in OPEN_PATHS:
            return RequestError(
                503,
                f"the server has {self.limits.max_connections} connections open "
                "(--max-connections); retry later",
                "server_error",
                code="server_overloaded",
                headers={"Retry-After": str(self.limits.retry_after_s), "Connection": "close"},
            )
        return None


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with deadlines on a request's head and body, counting its
    connection in the guard. A request cut off gets its answer here, in OpenAI's shape, when
    none has begun; the app then sees the client gone (`http.disconnect`)."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard
        self._waiting_for: str | None = None  # "head" or "body": what the deadline is for
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # type: ignore[arg-type]
        self.guard.connections += 1
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.connections -= 1
        self._wait_for(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def shutdown(self) -> None:
        """uvicorn's (a connection between requests closes, one in a request closes after its
        answer), except that a request whose body is still coming is not accepted: 503."""
        self.guard.stopping = True
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            message = "the server is shutting down: the request's body had not all arrived"
            self._cut_off(503, message, "server_error", None)
            return
        super().shutdown()

    def _follow(self) -> None:
        """Put the deadline on what the connection now reads: a request's head (from the
        connection's start or the previous request's end), its body (from its head), or
        nothing (the request is read; the app answers it)."""
        state = self.conn.their_state
        self._wait_for("head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None)

    def _wait_for(self, part: str | None) -> None:
        if part == self._waiting_for:
            return  # a deadline runs from where its part began, not from the last byte
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = part
        if part is not None:
            limits = self.guard.limits
            delay = limits.header_timeout_s if part == "head" else limits.body_timeout_s
            self._deadline = self.loop.call_later(delay, self._expired)

    def _expired(self) -> None:
        part, self._waiting_for, self._deadline = self._waiting_for, None, None
        if self.transport.is_closing():
            return
        limits = self.guard.limits
        seconds, flag = (
            (limits.header_timeout_s, "--header-timeout-s")
            if part == "head"
            else (limits.body_timeout_s, "--body-timeout-s")
        )
        log.info("cutting off %s: its request %s took over %g s", self.client, part, seconds)
        message = f"the request {part} did not arrive within {seconds:g} s ({flag})"
        self._cut_off(408, message, "invalid_request_error", "request_timeout")

    def _cut_off(self, status: int, message: str, kind: str, code: str | None) -> None:
        """Answer `status` if no answer has begun and some of a request came, then close."""
        body = json.dumps(error_body(message, kind, None, code)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        if self.conn.our_state is h11.SEND_RESPONSE:  # its head read, no answer begun
            reply = h11.Response(status_code=status, headers=headers, reason=_REASONS[status])
            out = self.conn.send(reply) + self.conn.send(h11.Data(data=body))
            self.transport.write(out + self.conn.send(h11.EndOfMessage()))
            if self.cycle is not None:  # the app's receive says the client left; its answer is
                self.cycle.disconnected = True  # dropped (as uvicorn does once it is gone)
                self.cycle.message_event.set()
        elif self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            # part of a head: h11 answers only a request it has read, so the bytes go as they are
            head = [f"HTTP/1.1 {status} ".encode() + _REASONS[status]]
            head += [name + b": " + value for name, value in headers]
            self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        self.transport.close()


_REASONS = {408: b"Request Timeout", 503: b"Service Unavailable"}


def server_for(app: Any, host: str, port: int, limits: ConnectionLimits) -> uvicorn.Server:
    """uvicorn's server for `app`, its connections held to `limits` (`run_server` runs it; a
    test may run it in a thread and stop it with `should_exit`)."""
    guard = ConnectionGuard(app, limits)
    config = uvicorn.Config(
        guard,
        host=host,
        port=port,
        http=functools.partial(GuardedH11Protocol, guard=guard),  # type: ignore[arg-type]
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]  # floats work
        timeout_graceful_shutdown=limits.shutdown_timeout_s,  # type: ignore[arg-type]
        log_level="info",
        access_log=False,
    )
    return uvicorn.Server(config)


def run_server(app: Any, host: str, port: int, limits: ConnectionLimits | None = None) -> None:
    """Serve `app` until interrupted (Ctrl-C or SIGTERM), its connections held to `limits`
    (default: the defaults, the loopback names and `host` allowed)."""
    limits = limits or ConnectionLimits(allowed_hosts=AllowedHosts.for_server(host))
    server = server_for(app, host, port, limits)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn raises Ctrl-C's signal again once it has shut down
        pass
    if not server.started:  # it logged why (the port taken, say)
        raise SystemExit(3)
