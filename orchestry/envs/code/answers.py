"""The answers the supervised warm start teaches for a code problem, as text (issue 57).

A role's answer is its reference code with the docstrings stripped (the model copied the docstring
and ran out of tokens: issue 57's probe), fenced as ```python ... ``` (the form `env.act` reads). The
single agent's answer is the whole program: the helpers' references then main's, each stripped,
joined by blank lines, fenced. `algos/sft.py` tokenizes these texts and adds the end of sequence to
train on them; the prepare stage counts their tokens to drop the problems whose answer an agent could
never write whole within `sampling.max_new_tokens` (`over_budget_parts`). Torch-free, so prepare
reads it without the model stack.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence

from orchestry.envs.code.problems import Problem

MAIN = "main"
"""`taught_answers`' key of the entry point's answer (the code team's main role)."""
SINGLE = "single"
"""`taught_answers`' key of the single agent's answer, the whole program."""


def without_docstrings(code: str) -> str:
    """`code` with every module, class and function docstring removed (unchanged if it does not
    parse: a reference that is no Python stays as it is)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def answer_text(code: str) -> str:
    """The answer an agent is taught to write for `code`: the code, docstrings off, fenced."""
    return f"```python\n{without_docstrings(code).strip()}\n```"


def solo_program(parts: Sequence[str]) -> str:
    """The single agent's program made of the team's reference parts (helpers first, as the joint
    program is): each part without its docstrings, joined by blank lines (`sft.solo_rows`)."""
    return "\n\n".join(without_docstrings(p).strip() for p in parts)


def taught_answers(problem: Problem) -> dict[str, str]:
    """The fenced answers the warm start teaches for `problem`: each helper's under its function
    name (`aux`, `aux1`, ...), the entry point's under `MAIN`, the whole program's under `SINGLE`.
    A part without a reference is taught to no one (no key), and the whole program is taught only
    when every part has one, as `sft.team_rows` and `sft.solo_rows` do."""
    parts = {spec.name: spec.reference for spec in problem.helpers} | {MAIN: problem.main.reference}
    answers = {role: answer_text(code) for role, code in parts.items() if code}
    if all(parts.values()):
        answers[SINGLE] = answer_text(solo_program(list(parts.values())))
    return answers


def over_budget_parts(
    problem: Problem, n_tokens: Callable[[str], int], max_new_tokens: int
) -> list[str]:
    """The keys of `taught_answers(problem)` whose answer is longer than `max_new_tokens` tokens,
    its end of sequence included; `n_tokens(text)` counts the text's tokens without special
    tokens, as `sft.answer_ids` encodes an answer (which then adds the end of sequence)."""
    answers = taught_answers(problem)
    return [role for role, text in answers.items() if n_tokens(text) + 1 > max_new_tokens]
