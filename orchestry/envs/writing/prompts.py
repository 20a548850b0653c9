"""The writing task's words to the agents: each part's instructions, the lone model's, feedback.

A 135M model with 128 new tokens reads these, so they are short and say how long to write (the
word targets of `reward.KindSpec`, scaled like the reward's bounds). Like the paper's prompts
(LLM_Collab_Writing `train_magrpo.py`), each agent is told what the other one writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestry.envs.base import Messages
from orchestry.envs.writing.reward import spec_for
from orchestry.envs.writing.tasks import WritingTask

# per kind: what each part is (position 0 = agent 1, 1 = agent 2)
PART_NAMES = {
    "tldr": ("a concise summary", "a detailed summary"),
    "arxiv": ("the background and motivation paragraph", "the method and contributions paragraph"),
}
_SYSTEM = {
    "tldr": "You summarize Reddit posts in plain text.",
    "arxiv": "You write introductions of research papers in plain text.",
}
_SOURCE_LABEL = {"tldr": "Post", "arxiv": "Abstract"}
_LINKS = '"because", "however" and "for example"'


def _source(task: WritingTask) -> str:
    return f"Title: {task.title}\n{_SOURCE_LABEL[task.kind]}: {task.source}"


def part_instruction(kind: str, position: int, scale: float) -> str:
    """What agent `position` (0 or 1) is asked to write, with its length."""
    n1, n2 = spec_for(kind).targets(scale)
    if kind == "tldr" and position == 0:
        return (
            f"Write a concise summary of this post in one or two sentences, about {n1} words. "
            "A teammate writes a longer, detailed summary."
        )
    if kind == "tldr":
        return (
            f"Write a detailed summary of this post in one paragraph, about {n2} words: two to "
            "three times longer than a teammate's one-sentence summary. Use varied words and "
            f"link ideas with words like {_LINKS}."
        )
    if position == 0:
        return (
            "Write the first paragraph of this paper's introduction: the background and "
            f"motivation, about {n1} words. A teammate writes the method paragraph, so do not "
            "describe the method."
        )
    return (
        "Write the second paragraph of this paper's introduction: the method and contributions, "
        f"about {n2} words. A teammate writes the background paragraph, so do not repeat it. "
        'Reuse the key terms of the abstract and link ideas with words like "specifically", '
        '"moreover" and "as a result".'
    )


def initial_messages(task: WritingTask, position: int, scale: float) -> Messages:
    """Agent `position`'s first observation: its job, the source and its instructions."""
    system = f"{_SYSTEM[task.kind]} You write {PART_NAMES[task.kind][position]}."
    user = (
        f"{_source(task)}\n\n{part_instruction(task.kind, position, scale)} "
        "Reply with your text only."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def solo_messages(task: WritingTask, scale: float) -> Messages:
    """One model writes both parts as two paragraphs (the single-model baseline)."""
    n1, n2 = spec_for(task.kind).targets(scale)
    first, second = PART_NAMES[task.kind]
    if task.kind == "tldr":
        ask = (
            f"Paragraph 1: {first} in one or two sentences, about {n1} words. Paragraph 2: "
            f"{second}, about {n2} words, with varied words and links such as {_LINKS}."
        )
    else:
        ask = (
            f"Paragraph 1: {first} of the introduction, about {n1} words. Paragraph 2: {second}, "
            f"about {n2} words, without repeating paragraph 1."
        )
    user = (
        f"{_source(task)}\n\nWrite two paragraphs separated by a blank line. {ask} "
        "Reply with the two paragraphs only."
    )
    return [{"role": "system", "content": _SYSTEM[task.kind]}, {"role": "user", "content": user}]


def first_part_note(kind: str, text: str) -> str:
    """Shown to agent 2 when agent 1 has finished (the sequential pipeline)."""
    return (
        f"Your teammate already wrote {PART_NAMES[kind][0]}:\n{text or '(empty)'}\n\nWrite yours."
    )


def teammate_note(text: str, position: int) -> str:
    """The discussion round: the other part, and a request to revise one's own."""
    other = "part 1" if position == 1 else "part 2"
    return (
        f"Your teammate wrote {other}:\n{text or '(empty)'}\n\n"
        "Revise your part so the two fit together. Reply with your text only."
    )


def feedback_message(
    kind: str,
    parts: Mapping[int, str],
    notes: str,
    score: tuple[float, float],
    position: int,
    advice: str | None = None,
) -> str:
    """Both parts, the reward in words, and a request to revise the agent's own part."""
    names = PART_NAMES[kind]
    shown = "\n\n".join(
        f"Part {i + 1} ({names[i]}):\n{parts[i] or '(empty)'}" for i in range(len(names))
    )
    total, best = score
    text = (
        f"Your team's text:\n\n{shown}\n\nScore {total:.2f} of {best:.2f}.\n{notes}\n\n"
        f"Revise your part, part {position + 1} ({names[position]}). Reply with your text only."
    )
    return f"{text}\n\nAdvice: {advice}" if advice else text
