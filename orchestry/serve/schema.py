"""The OpenAI chat-completions wire format: the request validated once, the replies as sent.

Only what the server does is accepted: `n` must be 1, roles are system/user/assistant, content is
text. Fields OpenAI clients may send that change nothing here (`user`, `stream_options`, ...) are
ignored; a field out of range fails validation, and `app.py` answers 400 naming it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    """POST /v1/chat/completions."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """0 = greedy decoding; None = the params' sampling temperature."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(default=None, ge=1)
    """None = the params' `sampling.max_new_tokens`; above the server's limit is a 400."""
    max_completion_tokens: int | None = Field(default=None, ge=1)
    """OpenAI's newer name for max_tokens (max_tokens wins when both are given)."""
    n: Literal[1] = 1
    stream: bool = False
    seed: int | None = None
    """Same seed, model, messages and sampling: the same answer (the request runs alone)."""


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def chat_completion(
    cid: str,
    model: str,
    content: str,
    finish_reason: str,
    prompt_tokens: int,
    completion_tokens: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole chat.completion object (the non-streaming answer)."""
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if extra:
        body.update(extra)
    return body


def chunk(
    cid: str, model: str, created: int, delta: dict[str, str], finish_reason: str | None
) -> dict[str, Any]:
    """One chat.completion.chunk of a stream."""
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
    }


def error_body(message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: the client raises it with this message."""
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}
