"""Client tools the OpenAI way, over the tool-call protocol the agents were trained with.

A chat request's `tools` are functions the *client* runs: the server never runs them. The agent
is shown them in a system message and calls one as it calls its own tools
(`envs/tools/protocol.py`):

    <tool name="get_weather">{"city": "Paris"}</tool>

Generation stops at `</tool>`; the call comes back as the assistant message's `tool_calls` (its
`arguments` the JSON object written, or, for a function of one parameter, the text written
under that parameter's name; otherwise the text as written: OpenAI too says to validate
arguments), `finish_reason` "tool_calls", `content` the text before the call (null when blank).
A call naming no declared function stays in the content as text.

The conversation comes back the same way: an assistant message's `tool_calls` are written as the
agent's calls after its content, a `tool` message as the user's `<result name="...">` message, as
the agents saw their own tools' results in training.

`tool_choice` "auto" (the default with tools) offers them; "none" leaves them out of the prompt;
a named function is asked for by name, and the reply is its call whatever the agent wrote: the
argument of the call it wrote (of that function or another), else its whole text.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestry.envs.tools.protocol import CLOSE, OPEN, parse_call, result_message
from orchestry.serve import schema

_OPEN = re.compile(re.escape(OPEN) + r"\b", re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*$", re.DOTALL)


@dataclass(frozen=True)
class ToolOffer:
    """The functions a request offers the agent, and the one it names (tool_choice)."""

    functions: tuple[schema.Function, ...]
    named: str | None = None

    @classmethod
    def of(cls, req: schema.ChatRequest) -> ToolOffer | None:
        """The request's offer, or None when it offers no tools (none, or tool_choice "none")."""
        if not req.offers_tools or req.tools is None:
            return None
        return cls(tuple(t.function for t in req.tools), req.named_tool)

    def instructions(self) -> str:
        """The system message that shows the agent the functions."""
        lines = []
        for f in self.functions:
            line = f"- {f.name}"
            if f.description:
                line += f": {f.description}"
            if f.parameters:
                line += f" Arguments: {json.dumps(f.parameters, ensure_ascii=False)}"
            lines.append(line)
        example = self.named or self.functions[0].name
        ask = (
            f"Call the function {self.named} now: write only the call."
            if self.named
            else "Call a function only when you need its result; otherwise answer directly."
        )
        return (
            "You can call these functions; the caller runs them and shows you the result.\n"
            f'Write a call as {OPEN} name="{example}">{{"argument": "value"}}{CLOSE} (the '
            "arguments as a JSON object) and stop.\n"
            f"{ask}\nFunctions:\n" + "\n".join(lines)
        )

    def read(self, text: str) -> tuple[str | None, list[dict[str, Any]] | None]:
        """The reply's content and tool calls from the agent's `text` (cut at the client's stop
        strings already): (text, None) when it called no declared function."""
        declared = {f.name.lower(): f for f in self.functions}
        call = parse_call(text)
        function = declared.get(call.name) if call is not None else None
        if self.named is not None and (function is None or function.name != self.named):
            function = next(f for f in self.functions if f.name == self.named)
            argument = text if call is None else call.argument
            return None, [_tool_call(function, argument)]
        if call is None or function is None:
            return text, None
        before = content_before_call(text)
        return (before if before.strip() else None), [_tool_call(function, call.argument)]


def content_before_call(text: str) -> str:
    """The text before the first `<tool` (what a stream may send before a call)."""
    found = _OPEN.search(text)
    return text if found is None else text[: found.start()]


def _tool_call(function: schema.Function, argument: str) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": function.name, "arguments": arguments(argument, function)},
    }


def arguments(text: str, function: schema.Function) -> str:
    """The `arguments` string of a call whose argument the agent wrote as `text`."""
    fenced = _FENCE.match(text)
    raw = (fenced.group(1) if fenced else text).strip()
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    properties = (function.parameters or {}).get("properties")
    if isinstance(properties, dict) and len(properties) == 1:
        return json.dumps({next(iter(properties)): raw}, ensure_ascii=False)
    return raw


def chat_messages(
    messages: Sequence[schema.ChatMessage], offer: ToolOffer | None
) -> list[dict[str, str]]:
    """The conversation as the chat template reads it (module doc), the offer's instructions in
    the system message."""
    names = {c.id: c.function.name for m in messages for c in m.tool_calls or ()}
    out: list[dict[str, str]] = []
    for m in messages:
        if m.role == "tool":
            assert m.tool_call_id is not None and m.content is not None  # schema._check_messages
            name = names[m.tool_call_id]
            out.append(
                {"role": "user", "content": result_message(name, m.content, len(m.content) + 1)}
            )
            continue
        content = m.content or ""
        for c in m.tool_calls or ():
            content += f'{OPEN} name="{c.function.name}">{c.function.arguments}{CLOSE}'
        out.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    if offer is not None:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{offer.instructions()}"}
        else:
            out.insert(0, {"role": "system", "content": offer.instructions()})
    return out
