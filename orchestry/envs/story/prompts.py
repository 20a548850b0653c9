"""Every text the story team reads: each role's prompt, the lone storyteller's, and the messages
that open a later turn (the team's story with its score, or the teammates' parts).

Short on purpose: a 135M model reads them, with at most 128 new tokens to answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestry.envs.base import Messages
from orchestry.envs.story.tasks import StoryTask

ROLE_SYSTEM = (
    "You are the {role}. {duty} You write one part of a short story with your teammates; write "
    "only your part, 2-4 sentences of prose, no title, no commentary."
)
SOLO_SYSTEM = (
    "You are a storyteller. Write a complete short story in {n} short paragraphs: an opening, a "
    "problem and an ending. Prose only, no title, no commentary."
)
TASK_LINES = "Theme: {theme}\nMain character: {protagonist}\nSetting: {setting}"


def _task_lines(task: StoryTask) -> str:
    return TASK_LINES.format(theme=task.theme, protagonist=task.protagonist, setting=task.setting)


def _order(agents: Sequence[str], agent: str) -> str:
    listed = [f"{i}. {a}" + (" (you)" if a == agent else "") for i, a in enumerate(agents, 1)]
    return f"The parts in order: {', '.join(listed)}."


def role_messages(
    task: StoryTask, agents: Sequence[str], agent: str, duties: Mapping[str, str]
) -> Messages:
    """A role's first observation: its duty, the theme and where its part sits in the story."""
    system = ROLE_SYSTEM.format(role=agent, duty=duties[agent])
    user = f"{_task_lines(task)}\n{_order(agents, agent)}\nWrite your part now."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def solo_messages(task: StoryTask, n_parts: int) -> Messages:
    """The lone storyteller's observation (single-model baseline): the whole story."""
    return [
        {"role": "system", "content": SOLO_SYSTEM.format(n=n_parts)},
        {"role": "user", "content": f"{_task_lines(task)}\nWrite the story now."},
    ]


def parts_text(parts: Sequence[tuple[str, str]]) -> str:
    """Parts labelled with their role, in order (an empty part shown as such)."""
    return "\n\n".join(
        f"{agent.capitalize()}: {part.strip() or '(empty)'}" for agent, part in parts
    )


def with_teammates_parts(messages: Messages, helper_parts: Sequence[tuple[str, str]]) -> Messages:
    """A first observation with the earlier roles' finished parts shown (sequential baseline)."""
    note = (
        f"Your teammates' parts so far:\n\n{parts_text(helper_parts)}\n\n"
        "Now write your part, continuing from theirs."
    )
    last = messages[-1]
    return [*messages[:-1], {"role": last["role"], "content": f"{last['content']}\n\n{note}"}]


def feedback_message(
    agent: str,
    parts: Sequence[tuple[str, str]],
    reward: Mapping[str, float],
    notes: str,
    advice: str | None,
) -> str:
    """The message opening an agent's next turn: the team's story, its score in words, a request."""
    score = (
        f"Score {reward['total']:.2f} of 1: quality {reward['quality']:.2f}, collaboration "
        f"{reward['collaboration']:.2f}, efficiency {reward['efficiency']:.2f}."
    )
    text = f"Your team's story:\n\n{parts_text(parts)}\n\n{score} {notes}"
    if advice:
        text += f"\n\nAdvice: {advice}"
    return f"{text}\n\nRewrite your part (the {agent}'s) so the story fits together."


def teammates_message(parts: Sequence[tuple[str, str]]) -> str:
    """The discussion round's message: the other roles' parts, and a request to revise."""
    return (
        f"Your teammates wrote:\n\n{parts_text(parts)}\n\n"
        "Rewrite your part so the story fits together with theirs. Write only your part."
    )
