"""The tool-call text protocol: how an agent calls a tool within its turn and sees the result.

The agent writes a call as

    <tool name="python">print(sorted([3, 1, 2]))</tool>

Generation stops at the closing `</tool>` (the stop string `CLOSE`), the tool runs on the text
between the tags, and the agent's next prompt shows the observation

    <result name="python">[1, 2, 3]</result>

as the user's message after its own partial answer; it then continues. The parser forgives what a
small model gets wrong: the name quoted with ' or " or not at all, any case, spaces around `=`, and
an argument wrapped in a ``` fence. A call that names no registered tool gets a result saying so
and listing the tools (it counts against the budget). The final answer, the text the environment
acts on, is everything the agent wrote outside its calls (`final_answer`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPEN = "<tool"
CLOSE = "</tool>"
"""The stop string: generation ends a segment where a call is closed."""

_CALL = re.compile(
    r"<tool\s+name\s*=\s*[\"']?([A-Za-z_][\w-]*)[\"']?\s*>(.*?)</tool>", re.DOTALL | re.IGNORECASE
)
_ANY_CALL = re.compile(r"<tool\b[^>]*>.*?(?:</tool>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n(.*?)\n?```\s*$", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call read from a segment: the tool's name (lower case) and its argument."""

    name: str
    argument: str
    end: int
    """Where the call's closing tag ends in the segment's text."""


@dataclass(frozen=True)
class ToolBudget:
    """A turn's budget (values: params `env.tools`, their one home)."""

    max_calls: int
    """Most tool calls an agent makes in one turn; a later call is not run."""
    max_result_chars: int
    """Each result is cut to this many characters (the rest is replaced by a note)."""

    def __post_init__(self) -> None:
        if self.max_calls < 1 or self.max_result_chars < 1:
            raise ValueError(f"ToolBudget needs max_calls >= 1 and max_result_chars >= 1: {self}")


def parse_call(text: str) -> ToolCall | None:
    """The first complete call in `text`, or None when it holds none."""
    match = _CALL.search(text)
    if match is None:
        return None
    argument = match.group(2)
    fenced = _FENCE.match(argument)
    if fenced is not None:
        argument = fenced.group(1)
    return ToolCall(match.group(1).lower(), argument.strip("\n"), match.end())


def result_message(name: str, result: str, max_chars: int) -> str:
    """The observation the agent sees: the result in its tags, cut to `max_chars`."""
    if len(result) > max_chars:
        result = result[:max_chars] + f"\n... [{len(result) - max_chars} more characters cut]"
    return f'<result name="{name}">\n{result}\n</result>'


def final_answer(segments: list[str]) -> str:
    """What the agent wrote in its turn outside its tool calls (an unclosed call at the end, cut by
    the token budget, is dropped too)."""
    return "".join(_ANY_CALL.sub("", s) for s in segments).strip("\n")


def instructions(descriptions: dict[str, str], max_calls: int) -> str:
    """The paragraph added to an agent's prompt when tools are on."""
    lines = "\n".join(f"- {name}: {text}" for name, text in descriptions.items())
    return (
        f"You may call a tool up to {max_calls} times before your final answer. Write a call as\n"
        '<tool name="python">print(1 + 1)</tool>\n'
        "and stop; the result comes back as <result>...</result> and you continue. Tools:\n"
        f"{lines}\n"
        "Your answer is everything you write outside the calls."
    )
