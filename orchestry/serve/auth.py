"""Who may use the server: an API key checked as OpenAI's clients send it, and a warning when the
server is reachable from other machines without one.

With a key (`--api-key` or ORCHESTRY_API_KEY), every path but `/health` and `/metrics` needs
`Authorization: Bearer <key>`; without it a request gets 401 in OpenAI's error shape, before its
body is read. `/health` and `/metrics` stay open for probes and scrapers: they tell the model names
and counts, nothing a request carried.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from starlette.responses import Response

from orchestry.serve.errors import RequestError

OPEN_PATHS = ("/health", "/metrics")
KEY_ENV = "ORCHESTRY_API_KEY"


def require_api_key(app: FastAPI, key: str) -> None:
    """Refuse (401) every request to `app` outside OPEN_PATHS without `Authorization: Bearer key`."""
    expected = f"Bearer {key}".encode()

    @app.middleware("http")
    async def check_key(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        sent = request.headers.get("authorization", "").encode("latin-1")  # the raw bytes
        if request.url.path in OPEN_PATHS or hmac.compare_digest(sent, expected):
            return await call_next(request)
        return RequestError(
            401,
            "missing or wrong API key: send the header `Authorization: Bearer <key>` "
            f"with the server's key (--api-key or {KEY_ENV})",
            "authentication_error",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        ).response()


def open_bind_warning(host: str, key: str | None) -> str | None:
    """A warning when `host` is reachable from other machines and no key guards it, else None."""
    if key or host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:  # a host name: it may resolve to any address
        pass
    return (
        f"serving on {host}, reachable from other machines, without an API key: anyone who can "
        f"reach the port can use the model; give --api-key or set {KEY_ENV}"
    )
