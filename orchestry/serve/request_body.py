"""A request's JSON body, read under a size limit and checked before any field is validated.

In order, each a 4xx in OpenAI's shape naming what is wrong:
1. a declared `Content-Length` over the limit is refused before a byte is read (413), and a body
   sent without one is counted as it comes and refused once over (413);
2. the body is UTF-8 (RFC 8259) and JSON, without NaN or Infinity (400);
3. it nests at most `MAX_DEPTH` levels, and none of its strings (keys included) holds a lone
   surrogate (`"\\ud800"` is valid JSON but no text: the tokenizer cannot read it) (400).

A client that hangs up before its body ends, or whose body came too slowly (`transport.py` cut it
off with a 408), gets a 499 nobody reads (nginx's "client closed request"): the metrics count it,
the log holds no traceback.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from orchestry.serve.errors import RequestError, clip

MAX_DEPTH = 32
"""Deepest nesting a request may have (OpenAI's chat requests nest about 5 levels)."""


async def read_json(request: Request, limit: int) -> Any:
    """The request's body as JSON, or a RequestError (see the module docstring)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise RequestError(400, f"Content-Length is not a number: {clip(declared)}")
        if int(declared) > limit:
            raise _too_large(limit)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise _too_large(limit)
    except ClientDisconnect:  # nobody to answer: counted (nginx's 499), not logged as a failure
        raise RequestError(
            499, "the client closed the connection before its body ended", code="client_closed"
        ) from None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise RequestError(
            400, f"the body is not UTF-8 (byte {err.start}); JSON requests are UTF-8"
        ) from None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise RequestError(
            400, f"the body is not JSON: {err.msg} (line {err.lineno}, column {err.colno})"
        ) from None
    except RecursionError:
        raise RequestError(400, f"the body nests deeper than {MAX_DEPTH} levels") from None
    check_values(data)
    return data


def check_values(data: Any) -> None:
    """Raise a RequestError naming the first place `data` nests too deep or holds a lone
    surrogate (iteratively: a deep body cannot exhaust the stack here)."""
    todo: list[tuple[Any, str, int]] = [(data, "", 0)]
    while todo:
        value, path, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise RequestError(400, f"the body nests deeper than {MAX_DEPTH} levels", param=path)
        if isinstance(value, str):
            _check_text(value, path or None)
        elif isinstance(value, dict):
            for key, item in value.items():
                _check_text(key, path or None, key=True)
                todo.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(value, list):
            todo += [
                (item, f"{path}.{i}" if path else str(i), depth + 1) for i, item in enumerate(value)
            ]


def _check_text(text: str, param: str | None, key: bool = False) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        what = f"a key of {param or 'the body'}" if key else (param or "the body")
        message = (
            f"{what} holds a lone surrogate (\\u{ord(text[err.start]):04x} at character "
            f"{err.start}); strings must be valid Unicode"
        )
        raise RequestError(400, message, param=param) from None


def _no_constant(name: str) -> Any:
    raise RequestError(400, f"the body is not JSON: {name} is no JSON number")


def _too_large(limit: int) -> RequestError:
    return RequestError(
        413,
        f"the body is over this server's limit of {limit} bytes (--max-body-bytes)",
        code="request_too_large",
    )
