"""The team's environment (a Dec-POMDP): what each agent sees, how its code is read, and the feedback.

Agents are named in params (`model.agents`); the last one is the main agent, the others are helpers matched
in order to the problem's helper functions. A helper sees the problem and is asked for its function only;
the main agent sees the problem and the signatures of the helpers it may call, never their code (the
paper's setting). After a turn, feedback built from the sandbox's diagnostics is appended to each agent's
own conversation, which becomes its next observation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import RewardBreakdown
from orchestry.envs.code.sandbox.runner import TestReport

SYSTEM_PROMPT = (
    "You are an expert Python programmer working in a team. Answer with one Python code block "
    "containing only the requested function(s)."
)

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_START = re.compile(r"^(?:def |async def |import |from |class |@)", re.MULTILINE)


@dataclass(frozen=True)
class Roles:
    """Agent names split into helpers (in problem order) and the main agent."""

    helpers: tuple[str, ...]
    main: str

    @classmethod
    def from_agents(cls, agents: Sequence[str]) -> Roles:
        return cls(helpers=tuple(agents[:-1]), main=agents[-1])

    @property
    def agents(self) -> tuple[str, ...]:
        return (*self.helpers, self.main)

    def check(self, problem: Problem) -> None:
        if len(problem.helpers) != len(self.helpers):
            raise ValueError(
                f"problem {problem.id} has {len(problem.helpers)} helper function(s) but the team has "
                f"{len(self.helpers)} helper agent(s) {list(self.helpers)}; set model.agents to match"
            )


def helper_prompt(problem: Problem, index: int) -> str:
    spec = problem.helpers[index]
    return (
        f"Task: {problem.prompt}\n\n"
        f"Your teammate writes the main function `{problem.main.name}`, which will call your helper. "
        f"Write ONLY this helper function, complete and correct:\n\n"
        f"```python\n{spec.signature}\n```"
    )


def main_prompt(problem: Problem) -> str:
    sigs = "\n\n".join(spec.signature for spec in problem.helpers)
    names = ", ".join(f"`{spec.name}`" for spec in problem.helpers)
    return (
        f"Task: {problem.prompt}\n\n"
        f"Teammates implement these helper functions ({names}); you cannot see their code but you "
        f"should call them:\n\n```python\n{sigs}\n```\n\n"
        f"Write ONLY the main function below (do not define the helpers):\n\n"
        f"```python\n{problem.main.signature}\n```"
    )


def initial_messages(problem: Problem, roles: Roles, agent: str) -> list[dict[str, str]]:
    """The first observation of `agent` on `problem` as chat messages."""
    roles.check(problem)
    if agent == roles.main:
        user = main_prompt(problem)
    elif agent in roles.helpers:
        user = helper_prompt(problem, roles.helpers.index(agent))
    else:
        raise ValueError(f"unknown agent {agent!r}; agents are {list(roles.agents)}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _code_region(text: str) -> str:
    blocks = [b for b in _FENCE.findall(text) if b.strip()]
    if blocks:
        return "\n\n".join(blocks)
    start = _CODE_START.search(text)
    return text[start.start() :] if start else ""


def _longest_parsing_prefix(code: str) -> ast.Module | None:
    lines = code.splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end]))
        except (SyntaxError, ValueError):
            continue
    return None


def extract_code(text: str, keep: Sequence[str] = (), drop: Sequence[str] = ()) -> str:
    """The Python definitions in a model completion.

    Takes fenced blocks (or the text from the first def/import when there is no fence), cuts a
    truncated tail back to the longest prefix that parses, and keeps only imports and top-level
    function/class definitions: example calls, prints and asserts are dropped, as are definitions
    named in `drop` (the main agent may not redefine a helper). `keep` names are never dropped.
    Returns "" when nothing usable is found.
    """
    tree = _longest_parsing_prefix(_code_region(text))
    if tree is None:
        return ""
    kept: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            kept.append(node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name in drop and node.name not in keep:
                continue
            kept.append(node)
    return "\n\n".join(ast.unparse(node) for node in kept)


def agent_code(text: str, problem: Problem, roles: Roles, agent: str) -> str:
    """Extract the code an agent contributes; helpers may not define main, main may not define helpers."""
    helper_names = [spec.name for spec in problem.helpers]
    if agent == roles.main:
        return extract_code(text, keep=[problem.main.name], drop=helper_names)
    own = problem.helpers[roles.helpers.index(agent)].name
    others = [n for n in helper_names if n != own]
    return extract_code(text, keep=[own], drop=[problem.main.name, *others])


def diagnostics(
    problem: Problem, reward: RewardBreakdown, report: TestReport | None, main_code: str
) -> str:
    """Sandbox diagnostics in words: syntax error with line, first failing assert, whether main called aux."""
    lines: list[str] = []
    if reward.structure == 0.0 or not main_code.strip():
        lines.append(f"The main function `{problem.main.name}` is missing or returns nothing.")
    if report is not None:
        if report.syntax_error:
            lines.append(f"Syntax error: {report.syntax_error}")
        elif report.load_error:
            lines.append(f"Error while loading the program: {report.load_error}")
        if report.timed_out:
            lines.append("The program timed out.")
        lines.append(f"Tests passed: {report.n_passed}/{len(report.passed)}.")
        if report.first_failure:
            lines.append(f"First failure: {report.first_failure}")
    elif reward.syntax == 0.0 and reward.structure > 0.0:
        lines.append("The joined program does not parse.")
    helpers = ", ".join(f"`{s.name}`" for s in problem.helpers)
    lines.append(
        f"The main function {'calls' if reward.main_calls_aux else 'does not call'} {helpers}."
    )
    return "\n".join(lines)


def feedback_message(mode: str, diag: str, suggestion: str | None = None) -> str:
    """The user message that opens the next turn."""
    if mode == "plain":
        return "Revise your function if needed and answer again with one code block."
    if mode == "level_feedback":
        return f"Feedback on the team's program:\n{diag}\n\nRevise your function and answer again with one code block."
    if mode == "expert_edits":
        advice = suggestion or "(no expert suggestion available)"
        return (
            f"Feedback on the team's program:\n{diag}\n\nAn expert reviewer suggests:\n{advice}\n\n"
            "Revise your function and answer again with one code block."
        )
    raise ValueError(f"unknown feedback mode {mode!r}; use level_feedback, plain or expert_edits")


def next_messages(
    previous: list[dict[str, str]], response: str, feedback: str
) -> list[dict[str, str]]:
    """An agent's next observation: its own history, its last answer, then the feedback."""
    return [
        *previous,
        {"role": "assistant", "content": response},
        {"role": "user", "content": feedback},
    ]
