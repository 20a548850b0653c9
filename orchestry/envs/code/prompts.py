"""What each agent of the code task is told: its first prompt, and the feedback after a turn.

Agents are named in params (`model.agents`); the last one is the main agent, the others are helpers matched
in order to the problem's helper functions. A helper sees the problem and is asked for its function only;
the main agent sees the problem and the signatures of the helpers it may call, never their code (the
paper's setting). After a turn, feedback built from the sandbox's diagnostics opens the agent's next turn.
The baselines' own prompts (one model alone, teammates' code shown) are here too.
"""

from __future__ import annotations

from orchestry.envs.base import Roles
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import RewardBreakdown
from orchestry.envs.code.sandbox import TestReport

SYSTEM_PROMPT = (
    "You are an expert Python programmer working in a team. Answer with one Python code block "
    "containing only the requested function(s)."
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
    check_roles(problem, roles)
    if agent == roles.main:
        user = main_prompt(problem)
    elif agent in roles.helpers:
        user = helper_prompt(problem, roles.helpers.index(agent))
    else:
        raise ValueError(f"unknown agent {agent!r}; agents are {list(roles.agents)}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def check_roles(problem: Problem, roles: Roles) -> None:
    if len(problem.helpers) != len(roles.helpers):
        raise ValueError(
            f"problem {problem.id} has {len(problem.helpers)} helper function(s) but the team has "
            f"{len(roles.helpers)} helper agent(s) {list(roles.helpers)}; set model.agents to match"
        )


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


def single_messages(problem: Problem, *, contract: bool) -> list[dict[str, str]]:
    """The single-model baseline: one model writes the whole entry point, helpers of its own allowed.
    `contract`: it is told the helpers' names and signatures, as main is (`main_prompt`), and asked
    for them and the entry point (`env.single_prompt: helper_contract`)."""
    user = single_contract_prompt(problem) if contract else single_prompt(problem)
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def single_prompt(problem: Problem) -> str:
    return (
        f"Task: {problem.prompt}\n\nWrite the complete function below (you may define helper "
        f"functions of your own):\n\n```python\n{problem.main.signature}\n```"
    )


def single_contract_prompt(problem: Problem) -> str:
    sigs = "\n\n".join(spec.signature for spec in problem.helpers)
    names = ", ".join(f"`{spec.name}`" for spec in problem.helpers)
    return (
        f"Task: {problem.prompt}\n\n"
        f"Your program must define these helper functions ({names}), and the main function "
        f"should call them:\n\n```python\n{sigs}\n```\n\n"
        f"Write the helper functions complete, then the main function below:\n\n"
        f"```python\n{problem.main.signature}\n```"
    )


def teammates_done_note(code: dict[str, str]) -> str:
    """The sequential baseline: the helpers' finished code, shown to main with its prompt."""
    shown = "\n\n".join(c for c in code.values() if c) or "# (the helper wrote no code)"
    return f"Your teammates already wrote:\n\n```python\n{shown}\n```"


def teammates_answer_note(others: dict[str, str]) -> str:
    """One round of discussion: the teammates' first answers, and the request to revise."""
    shown = "\n\n".join(c for c in others.values() if c) or "# (no code)"
    return (
        f"Your teammates answered:\n\n```python\n{shown}\n```\n\n"
        "Revise your own function so the team's program works, and answer with one "
        "code block."
    )
