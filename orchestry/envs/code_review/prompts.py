"""Every text the code-review team reads: each role's first prompt, the earlier roles' work shown
to the later ones, the feedback that opens a later turn, and the baselines' messages.

Roles are positions (`WRITER`, `REVIEWER`, `REFACTORER`); agents are named in params, so the prompts
speak of "the writer", "the reviewer" and "the refactorer" whatever the agents are called.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestry.envs.base import Messages
from orchestry.envs.code.problems import Problem

WRITER, REVIEWER, REFACTORER = 0, 1, 2
ROLE_NAMES = ("writer", "reviewer", "refactorer")

_CODE_SYSTEM = (
    "You are an expert Python programmer. Answer with one Python code block containing the "
    "requested function and any helper functions it needs."
)
_SYSTEM = (
    f"{_CODE_SYSTEM} You are the writer of a team: a reviewer reads your draft and a refactorer "
    "turns it into the final code.",
    "You are a careful Python code reviewer in a team: a writer drafts a function, you review the "
    "draft, a refactorer fixes it from your review. Answer in short plain prose or bullet points; "
    "never write code blocks.",
    f"{_CODE_SYSTEM} You are the refactorer of a team: a writer drafts the function, a reviewer "
    "comments on it, and your code is the team's final answer.",
)


def problem_text(problem: Problem) -> str:
    """The task, the entry point's signature and docstring, and the specified helpers' signatures
    (the shipped sets name them; HumanEval's helper is open, so none is shown)."""
    text = (
        f"Task: {problem.prompt.strip()}\n\nThe function `{problem.main.name}`:\n\n"
        f"```python\n{problem.main.signature.strip()}\n```"
    )
    helpers = [h.signature.strip() for h in problem.helpers if h.reference.strip()]
    if helpers:
        shown = "\n\n".join(helpers)
        text += (
            "\n\nHelper functions it may use, written in the same code block:\n\n"
            f"```python\n{shown}\n```"
        )
    return text


def _job(position: int, problem: Problem, max_words: int) -> str:
    name = problem.main.name
    if position == WRITER:
        return f"Write the complete function `{name}` (helper functions of your own allowed)."
    if position == REVIEWER:
        return (
            f"Review the writer's draft of `{name}`: name its concrete bugs and the edge cases it "
            f"gets wrong, in at most {max_words} words. Do not rewrite the code."
        )
    return (
        f"Write the final, corrected function `{name}` from the writer's draft and the "
        "reviewer's comments, in one Python code block."
    )


def first_messages(problem: Problem, position: int, max_words: int) -> Messages:
    """A role's first observation: the problem and its job."""
    user = f"{problem_text(problem)}\n\n{_job(position, problem, max_words)}"
    return [{"role": "system", "content": _SYSTEM[position]}, {"role": "user", "content": user}]


def draft_block(draft: str) -> str:
    return f"```python\n{draft.strip()}\n```" if draft.strip() else "(no function was found)"


def earlier_note(position: int, draft: str, review: str | None) -> str:
    """The earlier roles' actions of this turn, shown to the reviewer (the draft) or to the
    refactorer (the draft and the review), with what to do now."""
    note = f"The writer's draft:\n\n{draft_block(draft)}"
    if position == REVIEWER:
        return f"{note}\n\nWrite your review now."
    return (
        f"{note}\n\nThe reviewer's comments:\n\n{(review or '').strip() or '(no comments)'}\n\n"
        "Answer with the final function in one Python code block, with every helper it calls "
        "(only your code is kept, not the draft's)."
    )


def with_note(messages: Messages, note: str) -> Messages:
    """`messages` with `note` appended to the last (user) message."""
    last = messages[-1]
    return [*messages[:-1], {"role": last["role"], "content": f"{last['content']}\n\n{note}"}]


_REQUESTS = (
    "Write the function again, fixing what failed, in one Python code block.",
    "Review the next draft more usefully: name the bug behind each failing test and the edge "
    "cases it misses, in at most {max_words} words, without rewriting the code.",
    "Write the final function again so every test passes, in one Python code block.",
)


def feedback_message(
    position: int, notes: str, review: str, advice: str | None, max_words: int
) -> str:
    """The message that opens a role's next turn: the tests' verdict on the draft and the final
    (`notes`), the review, an expert's advice if any, and what to do better."""
    text = (
        f"Result of the team's last attempt:\n{notes}\n\n"
        f"The reviewer's comments:\n{review.strip() or '(no comments)'}"
    )
    if advice:
        text += f"\n\nAn expert reviewer suggests:\n{advice}"
    return f"{text}\n\n{_REQUESTS[position].format(max_words=max_words)}"


def solo_messages(problem: Problem) -> Messages:
    """One model alone writes the function (the single-model baseline)."""
    user = f"{problem_text(problem)}\n\n{_job(WRITER, problem, 0)}"
    return [{"role": "system", "content": _CODE_SYSTEM}, {"role": "user", "content": user}]


def teammates_message(others: Sequence[tuple[int, str]], position: int, max_words: int) -> str:
    """The discussion round: the other roles' answers (position, action), and a request to revise."""
    shown = []
    for pos, action in others:
        body = (action.strip() or "(no comments)") if pos == REVIEWER else draft_block(action)
        shown.append(f"The {ROLE_NAMES[pos]} answered:\n\n{body}")
    request = (
        f"Revise your review in at most {max_words} words, without rewriting the code."
        if position == REVIEWER
        else "Revise your function in light of their answers, in one Python code block."
    )
    return "\n\n".join([*shown, request])


def episode_text(names: Sequence[str], draft: str, review: str, final: str, final_from: str) -> str:
    """A readable rendering of one episode: the draft, the review, the final code."""
    writer, reviewer, refactorer = names
    source = refactorer if final_from == "refactorer" else f"{writer}'s draft stands"
    return (
        f"## Draft ({writer})\n{draft_block(draft)}\n\n"
        f"## Review ({reviewer})\n{review.strip() or '(no comments)'}\n\n"
        f"## Final ({source})\n{draft_block(final)}"
    )
