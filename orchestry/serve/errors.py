"""OpenAI's error object on every path: a refused request, an unknown route or method, a failure.

Every error the server sends is `{"error": {"message", "type", "param", "code"}}`, so the official
client raises it with the message. Client input appears in a message only as a short prefix
(`clip`): an error never echoes a megabyte back, nor a name the client chose at length.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger(__name__)

ECHO_CHARS = 64
"""The most characters of client input an error message repeats."""
_KIND = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}


def clip(text: str, limit: int = ECHO_CHARS) -> str:
    """`text`, or its first `limit` characters and how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def error_body(
    message: str, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object: the client raises it with this message."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class RequestError(Exception):
    """A request the server refuses: its HTTP status, message, the field at fault, headers."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.param = None if param is None else clip(param)
        self.code, self.headers = code, headers

    def response(self) -> JSONResponse:
        body = error_body(self.message, self.kind, self.param, self.code)
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error in OpenAI's shape: refusals, routing's 404 and 405, anything unexpected."""

    @app.exception_handler(RequestError)
    async def refused(_: Request, err: RequestError) -> JSONResponse:
        return err.response()

    @app.exception_handler(HTTPException)
    async def routing(request: Request, err: HTTPException) -> JSONResponse:
        where = f"{request.method} {clip(request.url.path)}"
        kind = _KIND.get(err.status_code, "invalid_request_error")
        return RequestError(
            err.status_code, f"{err.detail}: {where}", kind, None, None, err.headers
        ).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        # the traceback goes to the log (Starlette re-raises after this answer); the client
        # gets the error's type, not its text, which may hold anything
        log.error("%s %s failed: %r", request.method, clip(request.url.path), err)
        message = f"the server failed ({type(err).__name__}); its log has the traceback"
        return RequestError(500, message, "server_error").response()
