"""OpenAI's chat-completions and (legacy) completions requests, validated once (the replies as
sent: `responses.py`).

Only what the server does is accepted, strictly typed (`"stream": "yes"` is no boolean): `n` is 1,
roles are system/developer/user/assistant/tool, content is text or a list of text parts, `stop`
holds at most 4 strings, tools are functions the client runs (`tool_choice` none, auto or one named
function). A completions `prompt` is a string or a list of strings (token ids: 400). An OpenAI field
the server does not honour (`logprobs`, `response_format`, `suffix`, ...) is refused naming it,
never ignored; it passes only unset (null) or at its no-op value (`"logprobs": false`, a penalty of
0, `best_of` 1). Any other field is refused as unknown.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestry.serve.errors import RequestError, clip

UNSUPPORTED: dict[str, object] = {
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
for nothing (null always does too). `functions`/`function_call` are OpenAI's old names of tools."""
UNSUPPORTED_COMPLETION: dict[str, object] = {
    "logprobs": None,
    "suffix": None,
    "best_of": 1,
    "logit_bias": None,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "user": None,
}
"""The same for OpenAI's (legacy) completions."""
MAX_STOP = 4
MAX_PROMPTS = 16
"""Most prompts one completions request may hold (each is answered as a request of its own)."""
DEFAULT_COMPLETION_TOKENS = 16
"""OpenAI's default max_tokens for completions (chat's default is the params' max_new_tokens)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class FunctionCall(_Strict):
    name: str = Field(min_length=1)
    arguments: str


class ToolCall(_Strict):
    """A call an assistant message made (OpenAI's `tool_calls` item)."""

    id: str = Field(min_length=1)
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    """`developer` is OpenAI's newer name for `system`; `tool` answers an assistant's tool call."""
    content: str | None = None
    """Text, or OpenAI's list of text parts (`[{"type": "text", "text": ...}]`, joined by "\\n");
    null only in an assistant message with `tool_calls`."""
    tool_calls: list[ToolCall] | None = None
    """An assistant message's calls (as this server returned them)."""
    tool_call_id: str | None = None
    """A tool message's answer to the call of this id."""

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


class Function(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
    """The tool-call protocol's names (`envs/tools/protocol.py`): a letter or _, then letters,
    digits, _ or -; at most 64 characters, as OpenAI's."""
    description: str | None = None
    parameters: dict[str, Any] | None = None
    """A JSON schema of the arguments object; shown to the model, not enforced (as OpenAI)."""
    strict: bool | None = None
    """Only null or false: the server cannot force arguments to the schema."""


class Tool(_Strict):
    type: Literal["function"]
    function: Function


class NamedFunction(_Strict):
    name: str = Field(min_length=1)


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


class StreamOptions(_Strict):
    include_usage: bool = False
    """A last chunk with the request's usage (and no choices) before `[DONE]`."""


class _Sampled(_Strict):
    """What chat and completions requests share: the model and how it samples."""

    model: str = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    """0 = greedy decoding; None = the params' sampling temperature."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    seed: int | None = Field(default=None, ge=-(2**63), le=2**63 - 1)
    """Same seed, model, prompt and sampling: the same answer (the request runs alone)."""
    stop: list[str] = Field(default_factory=list)
    """Up to 4 strings; the output ends before the first one (finish_reason "stop")."""

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        stops = [] if value is None else [value] if isinstance(value, str) else value
        if not isinstance(stops, list) or len(stops) > MAX_STOP or "" in stops:
            raise ValueError(f"a string or a list of at most {MAX_STOP} non-empty strings")
        return stops

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class ChatRequest(_Sampled):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    """None = the params' `sampling.max_new_tokens`; above the server's limit is a 400."""
    max_completion_tokens: int | None = Field(default=None, ge=1)
    """OpenAI's newer name for max_tokens (max_tokens wins when both are given)."""
    tools: list[Tool] | None = Field(default=None, min_length=1)
    """Functions the model may call; the client runs them (never the server)."""
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """None: "auto" with tools, "none" without; "required": 400 (name the function instead)."""
    parallel_tool_calls: bool | None = None
    """Any: a reply holds at most one call (generation stops at the call's end)."""

    @property
    def offers_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def named_tool(self) -> str | None:
        choice = self.tool_choice
        return choice.function.name if isinstance(choice, NamedToolChoice) else None


class CompletionRequest(_Sampled):
    """POST /v1/completions (OpenAI's legacy text completions)."""

    prompt: list[str]
    """A string, or a list of up to MAX_PROMPTS strings: one choice each (index in order)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """None = 16, OpenAI's default for completions; above the server's limit is a 400."""
    echo: bool = False
    """The prompt is repeated before each choice's text."""

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_list(cls, value: Any) -> Any:
        prompts = [value] if isinstance(value, str) else value
        if isinstance(prompts, list) and prompts and all(isinstance(p, str) for p in prompts):
            if "" in prompts:
                raise ValueError("an empty prompt: give the text to continue")
            if len(prompts) > MAX_PROMPTS:
                raise ValueError(f"{len(prompts)} prompts; at most {MAX_PROMPTS} per request")
            return prompts
        if (
            isinstance(prompts, list)
            and prompts
            and all(
                isinstance(p, int) or (isinstance(p, list) and all(isinstance(t, int) for t in p))
                for p in prompts
            )
        ):
            raise ValueError("token ids are not read by this server; send the prompt as text")
        raise ValueError("a non-empty string or a list of non-empty strings")


Request = TypeVar("Request", ChatRequest, CompletionRequest)


def parse_chat(data: Any) -> ChatRequest:
    """The chat request in `data` (a parsed JSON body), or a RequestError naming the field at
    fault."""
    req = _parse(ChatRequest, data, UNSUPPORTED)
    _check_messages(req.messages)
    _check_tools(req)
    return req


def parse_completion(data: Any) -> CompletionRequest:
    """The completions request in `data`, or a RequestError naming the field at fault."""
    return _parse(CompletionRequest, data, UNSUPPORTED_COMPLETION)


def _parse(kind: type[Request], data: Any, unsupported: dict[str, object]) -> Request:
    if isinstance(data, dict):
        data = {
            k: v for k, v in data.items() if k not in unsupported or v not in (None, unsupported[k])
        }
    try:
        req = kind.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        raise RequestError(400, _message(first, param, unsupported), param=param) from None
    if req.stream_options is not None and not req.stream:
        raise RequestError(400, "stream_options: only with stream: true", param="stream_options")
    return req


def _check_messages(messages: list[ChatMessage]) -> None:
    """Each role's fields: content (null only beside an assistant's tool_calls), tool_calls only
    from the assistant, a tool message answering a call made earlier in the conversation."""
    calls: set[str] = set()
    for i, m in enumerate(messages):
        if m.tool_calls is not None and m.role != "assistant":
            _refuse(f"messages.{i}.tool_calls", "only an assistant message holds tool_calls")
        if m.content is None and not (m.role == "assistant" and m.tool_calls):
            _refuse(f"messages.{i}.content", "Field required")
        if m.role == "tool":
            if m.tool_call_id is None:
                _refuse(f"messages.{i}.tool_call_id", "a tool message answers a call: give its id")
            if m.tool_call_id not in calls:
                _refuse(
                    f"messages.{i}.tool_call_id",
                    f"{clip(m.tool_call_id)!r} is no call of an earlier assistant message",
                )
        elif m.tool_call_id is not None:
            _refuse(f"messages.{i}.tool_call_id", "only a tool message answers a call")
        calls |= {c.id for c in m.tool_calls or ()}


def _check_tools(req: ChatRequest) -> None:
    names = [t.function.name for t in req.tools or ()]
    for i, tool in enumerate(req.tools or ()):
        if tool.function.strict:
            _refuse(
                f"tools.{i}.function.strict",
                "this server cannot force the arguments to the schema; send null or false",
            )
        if tool.function.name.lower() in [n.lower() for n in names[:i]]:
            _refuse(
                f"tools.{i}.function.name",
                f"{tool.function.name!r} is declared twice (names are read in any case)",
            )
    if req.tool_choice == "required":
        _refuse(
            "tool_choice",
            '"required" is not supported by this server: name the function '
            '({"type": "function", "function": {"name": ...}}) or use "auto"',
        )
    if req.tool_choice not in (None, "none") and not names:
        _refuse("tool_choice", "needs tools")
    if req.named_tool is not None and req.named_tool not in names:
        _refuse(
            "tool_choice.function.name",
            f"{clip(req.named_tool)!r} is none of the tools: {', '.join(names)}",
        )


def _refuse(param: str, what: str) -> None:
    raise RequestError(400, f"{param}: {what}", param=param)


def _message(error: Any, param: str | None, unsupported: dict[str, object]) -> str:
    if error["type"] == "extra_forbidden" and param in unsupported:
        what = "not supported by this server (docs/serving.md lists the fields it honours); send it null or leave it out"
    elif error["type"] == "extra_forbidden":
        what = "not a field of this server's requests (docs/serving.md lists them)"
    elif error["type"] == "model_type" and not param:
        what = "the body must be a JSON object"
    else:
        what = error["msg"].removeprefix("Value error, ")
    return f"{clip(param)}: {what}" if param else what
