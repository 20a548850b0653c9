"""The objects the server sends, in OpenAI's wire format: whole chat.completion and
text_completion objects, the chunks of their streams, usage."""

from __future__ import annotations

import time
import uuid
from typing import Any


def completion_id(prefix: str = "chatcmpl") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_completion(
    cid: str,
    model: str,
    content: str | None,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
    extra: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A whole chat.completion object (the non-streaming answer)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }
    if extra:
        body.update(extra)
    return body


def text_completion(
    cid: str,
    model: str,
    choices: list[tuple[str, str]],
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """A whole text_completion object: `choices` (text, finish_reason), one per prompt."""
    return {
        "id": cid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "text": text, "finish_reason": finish, "logprobs": None}
            for i, (text, finish) in enumerate(choices)
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chunk(
    cid: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    finish_reason: str | None,
    usage_: dict[str, int] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """One chat.completion.chunk of a stream; `delta` None: the usage chunk (no choices)."""
    return _streamed(
        "chat.completion.chunk", "delta", cid, model, created, delta, finish_reason, usage_, index
    )


def text_chunk(
    cid: str,
    model: str,
    created: int,
    text: str | None,
    finish_reason: str | None,
    usage_: dict[str, int] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """One streamed text_completion object; `text` None: the usage chunk (no choices)."""
    return _streamed(
        "text_completion", "text", cid, model, created, text, finish_reason, usage_, index
    )


def _streamed(
    kind: str,
    field: str,
    cid: str,
    model: str,
    created: int,
    value: Any,
    finish_reason: str | None,
    usage_: dict[str, int] | None,
    index: int,
) -> dict[str, Any]:
    """A streamed object of `kind` whose one choice carries `value` as `field` (none: no choices)."""
    choices = (
        []
        if value is None
        else [{"index": index, field: value, "finish_reason": finish_reason, "logprobs": None}]
    )
    body: dict[str, Any] = {
        "id": cid,
        "object": kind,
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage_ is not None:
        body["usage"] = usage_
    return body
