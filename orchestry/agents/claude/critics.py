"""Claude as a critic: edit suggestions for each agent (`expert_edits`), a cooperation score
(`judge_cooperation`), a story's quality (`judge_story`, the story env's judge) and how well a
team's joint answer solves its task (`judge_joint`, beam search's optional judge).

Each asks for a JSON reply checked against a schema; an off-schema reply is asked again once with
the reason, and a second one gives None. API errors (`ClaudeCallFailed`, `BudgetExceeded`) from
the client propagate: they are not about the reply.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from orchestry.agents.claude.client import ClaudeClient

log = logging.getLogger(__name__)
T = TypeVar("T")

# -------------------------------------------------------------------------------------------------
# Structured requests: a JSON reply checked against a schema, asked again once with the reason.


class OffSchema(ValueError):
    """A reply that is not the JSON object that was asked for; the message says why."""


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a reply that is only that object (optionally inside one ``` fence)."""
    body = text.strip()
    if body.startswith("```"):
        first_newline = body.find("\n")
        if first_newline < 0 or not body.endswith("```"):
            raise OffSchema("reply opens a code fence but does not close it")
        body = body[first_newline + 1 : -3].strip()

    def reject_constant(name: str) -> None:
        raise OffSchema(f"reply uses the non-JSON number {name}")

    try:
        value = json.loads(body, parse_constant=reject_constant)
    except json.JSONDecodeError as err:
        raise OffSchema(f"reply is not valid JSON ({err.msg} at char {err.pos})") from err
    if not isinstance(value, dict):
        raise OffSchema(f"reply is a JSON {type(value).__name__}, not an object")
    return value


def _ask_json(
    client: ClaudeClient, system: str, user_text: str, parse: Callable[[str], T], what: str
) -> T | None:
    """Ask once; if the reply is off-schema, ask once more saying why; then give up with None."""
    prompt = user_text
    for attempt in (1, 2):
        reply = client.complete(system, [{"role": "user", "content": prompt}])
        try:
            return parse(reply.text)
        except OffSchema as err:
            reason = str(err)
            if reply.stop_reason == "max_tokens":
                reason += " (the reply was cut at max_tokens)"
            log.warning("%s: off-schema reply on attempt %d: %s", what, attempt, reason)
            prompt = (
                f"{user_text}\n\nYour previous reply was rejected: {reason}. "
                "Reply again with only the JSON object described above."
            )
    log.warning("%s failed: two off-schema replies; no result for this request", what)
    return None


SCORE_REPLY = (
    'Reply with only a JSON object {"score": <number from 0 to 1>, "reason": "<one sentence>"}.'
)


def parse_score(text: str) -> float:
    """The score of a `{"score": 0..1, "reason": "..."}` reply (OffSchema when it is not one)."""
    value = parse_json_object(text)
    if set(value) != {"score", "reason"}:
        raise OffSchema(f"keys {sorted(value)} are not exactly ['reason', 'score']")
    score, reason = value["score"], value["reason"]
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise OffSchema(f"score {score!r} is not a number")
    if not 0.0 <= score <= 1.0:
        raise OffSchema(f"score {score} is outside [0, 1]")
    if not isinstance(reason, str):
        raise OffSchema("reason is not a string")
    return float(score)


def _code_sections(code_by_agent: Mapping[str, str]) -> str:
    return "\n\n".join(
        f"Code written by agent {agent!r}:\n```python\n{code}\n```"
        for agent, code in code_by_agent.items()
    )


EXPERT_SYSTEM = (
    "You are an expert Python reviewer coaching a team of agents that write one program "
    "together: a helper agent writes an auxiliary function and the main agent writes the "
    "entry-point function, which may call it. You give each agent one concrete, actionable "
    "suggestion for editing its own code. You never write the full solution. You reply with a "
    "single JSON object and nothing else."
)


def expert_edits(
    client: ClaudeClient, problem_prompt: str, code_by_agent: dict[str, str], diagnostics: str
) -> dict[str, str] | None:
    """Edit suggestions {agent: suggestion} from Claude; None after two off-schema replies.

    API errors (`ClaudeCallFailed`, `BudgetExceeded`) propagate: they are not about the reply.
    """
    agents = list(code_by_agent)
    if not agents:
        raise ValueError("expert_edits needs the code of at least one agent")
    user_text = (
        f"Problem:\n{problem_prompt}\n\n{_code_sections(code_by_agent)}\n\n"
        f"Diagnostics from running the team's program and its tests:\n{diagnostics}\n\n"
        f"Reply with only a JSON object with exactly these keys: {json.dumps(agents)}. Each "
        "value is a string: your suggestion to that agent for editing its code."
    )

    def parse(text: str) -> dict[str, str]:
        value = parse_json_object(text)
        if set(value) != set(agents):
            raise OffSchema(f"keys {sorted(value)} are not exactly {sorted(agents)}")
        for agent, suggestion in value.items():
            if not isinstance(suggestion, str) or not suggestion.strip():
                raise OffSchema(f"the value for {agent!r} is not a non-empty string")
        return {agent: value[agent].strip() for agent in agents}

    return _ask_json(client, EXPERT_SYSTEM, user_text, parse, "expert_edits")


JUDGE_SYSTEM = (
    "You judge how well a team of agents cooperated on one program: a helper agent writes an "
    "auxiliary function and the main agent writes the entry-point function, which may call it. You "
    "judge the division of labour, not only correctness. You reply with a single JSON object and "
    "nothing else."
)


def judge_cooperation(
    client: ClaudeClient, problem_prompt: str, code_by_agent: dict[str, str]
) -> float | None:
    """Cooperation quality in [0, 1] from Claude; None after two off-schema/out-of-range replies.

    API errors (`ClaudeCallFailed`, `BudgetExceeded`) propagate; a score is never invented.
    """
    if not code_by_agent:
        raise ValueError("judge_cooperation needs the code of at least one agent")
    user_text = (
        f"Problem:\n{problem_prompt}\n\n{_code_sections(code_by_agent)}\n\n"
        "Score the cooperation from 0 to 1: 0 when the helper is missing, useless or ignored, or "
        "the main function duplicates its work; 1 when the helper does a meaningful, correct part "
        f"of the task and the main function uses it correctly. {SCORE_REPLY}"
    )

    return _ask_json(client, JUDGE_SYSTEM, user_text, parse_score, "judge_cooperation")


STORY_JUDGE_SYSTEM = (
    "You judge short stories written by a team of writers. You are strict and consistent. You "
    "reply with a single JSON object and nothing else."
)


def judge_story(client: ClaudeClient, prompt_template: str, theme: str, story: str) -> float | None:
    """A story's quality in [0, 1] from Claude; None after two off-schema/out-of-range replies.

    `prompt_template`: the judge prompt with `{theme}` and `{story}` (data/story/judge_prompt.md),
    filled by plain replacement (a story may hold braces). API errors (`ClaudeCallFailed`,
    `BudgetExceeded`) propagate; a score is never invented.
    """
    for slot in ("{theme}", "{story}"):
        if slot not in prompt_template:
            raise ValueError(f"the story judge prompt has no {slot} placeholder")
    # theme first: a story that contains the text "{theme}" stays as written
    user_text = prompt_template.replace("{theme}", theme).replace("{story}", story)
    return _ask_json(
        client,
        STORY_JUDGE_SYSTEM,
        f"{user_text.rstrip()}\n\n{SCORE_REPLY}",
        parse_score,
        "judge_story",
    )


JOINT_JUDGE_SYSTEM = (
    "You judge the joint answer of a team of agents to one task: each agent wrote its own part, "
    "and the parts together are the team's answer. You judge the whole: whether the parts fit "
    "together and solve the task as asked. You are strict and consistent. You reply with a single "
    "JSON object and nothing else."
)


def judge_joint(client: ClaudeClient, task_text: str, answers: Mapping[str, str]) -> float | None:
    """How well the agents' answers together solve the task, in [0, 1] from Claude; None after
    two off-schema/out-of-range replies.

    `task_text`: the task as one model alone is given it; `answers`: each agent's answer (its
    action), shown in this order. API errors (`ClaudeCallFailed`, `BudgetExceeded`) propagate; a
    score is never invented.
    """
    if not answers:
        raise ValueError("judge_joint needs the answer of at least one agent")
    shown = "\n\n".join(
        f'<answer agent="{agent}">\n{answer.strip() or "(empty)"}\n</answer>'
        for agent, answer in answers.items()
    )
    user_text = (
        f"<task>\n{task_text.strip()}\n</task>\n\nThe agents' answers:\n\n{shown}\n\n"
        "Score from 0 to 1 how well these answers together solve the task: 0 when they do not "
        "solve it at all (missing, wrong or not fitting together), 1 when together they solve it "
        f"completely and correctly. {SCORE_REPLY}"
    )
    return _ask_json(client, JOINT_JUDGE_SYSTEM, user_text, parse_score, "judge_joint")
