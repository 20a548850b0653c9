"""The OpenAI chat-completions wire format: the request validated once, the replies as sent.

Only what the server does is accepted, strictly typed (`"stream": "yes"` is no boolean): `n` is 1,
roles are system/developer/user/assistant, content is text or a list of text parts, `stop` holds at
most 4 strings. An OpenAI field the server does not honour (`tools`, `logprobs`,
`response_format`, ...) is refused naming it, never ignored; it passes only unset (null) or at its
no-op value (`"logprobs": false`, a penalty of 0). Any other field is refused as unknown.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestry.serve.errors import RequestError, clip

UNSUPPORTED: dict[str, object] = {
    "tools": None,
    "tool_choice": None,
    "parallel_tool_calls": None,
    "functions": None,
    "function_call": None,
    "logprobs": False,
    "top_logprobs": None,
    "response_format": None,
    "logit_bias": None,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "user": None,
    "metadata": None,
    "store": False,
    "service_tier": None,
    "modalities": None,
    "audio": None,
    "prediction": None,
    "reasoning_effort": None,
    "web_search_options": None,
}
"""OpenAI's chat-completions fields this server does not honour, each with the value that asks
for nothing (null always does too)."""
MAX_STOP = 4


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant"]
    """`developer` is OpenAI's newer name for `system`."""
    content: str
    """Text, or OpenAI's list of text parts (`[{"type": "text", "text": ...}]`, joined by "\\n")."""

    @field_validator("content", mode="before")
    @classmethod
    def _join_text_parts(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        if not value:
            raise ValueError("an empty list of parts")
        texts = []
        for i, part in enumerate(value):
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
                and set(part) == {"type", "text"}
            ):
                raise ValueError(
                    f'part {i} is not {{"type": "text", "text": ...}}; only text is read'
                )
            texts.append(part["text"])
        return "\n".join(texts)

    def chat(self) -> dict[str, str]:
        """The message as the chat template reads it."""
        return {
            "role": "system" if self.role == "developer" else self.role,
            "content": self.content,
        }


class StreamOptions(_Strict):
    include_usage: bool = False
    """A last chunk with the request's usage (and no choices) before `[DONE]`."""


class ChatRequest(_Strict):
    """POST /v1/chat/completions."""

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
    stream_options: StreamOptions | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    """Same seed, model, messages and sampling: the same answer (the request runs alone)."""
    stop: list[str] = Field(default_factory=list)
    """Up to 4 strings; the output ends before the first one (finish_reason "stop")."""

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        stops = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(stops, list) or len(stops) > MAX_STOP or "" in stops:
            raise ValueError(f"a string or a list of at most {MAX_STOP} non-empty strings")
        return stops


def parse_chat(data: Any) -> ChatRequest:
    """The request in `data` (a parsed JSON body), or a RequestError naming the field at fault."""
    if isinstance(data, dict):
        data = {
            k: v for k, v in data.items() if k not in UNSUPPORTED or v not in (None, UNSUPPORTED[k])
        }
    try:
        req = ChatRequest.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise RequestError(400, _message(first, param), param=param) from None
    if req.stream_options is not None and not req.stream:
        raise RequestError(400, "stream_options: only with stream: true", param="stream_options")
    return req


def _message(error: Any, param: str | None) -> str:
    if error["type"] == "extra_forbidden" and param in UNSUPPORTED:
        what = "not supported by this server (docs/serving.md lists the fields it honours); send it null or leave it out"
    elif error["type"] == "extra_forbidden":
        what = "not a field of this server's chat completions (docs/serving.md lists them)"
    elif error["type"] == "model_type" and not param:
        what = "the body must be a JSON object"
    else:
        what = error["msg"].removeprefix("Value error, ")
    return f"{clip(param)}: {what}" if param else what


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


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
        "usage": usage(prompt_tokens, completion_tokens),
    }
    if extra:
        body.update(extra)
    return body


def chunk(
    cid: str,
    model: str,
    created: int,
    delta: dict[str, str] | None,
    finish_reason: str | None,
    usage_: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One chat.completion.chunk of a stream; `delta` None: the usage chunk (no choices)."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
    )
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage_ is not None:
        body["usage"] = usage_
    return body
