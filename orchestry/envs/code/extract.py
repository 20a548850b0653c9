"""Reading an agent's code out of its completion.

A completion may hold prose, several fenced blocks, example calls or a truncated tail. What the team's
program gets from it is only the imports and top-level definitions, and each agent only the
definitions its role allows (a helper may not define main, main may not redefine a helper).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from orchestry.envs.base import Roles
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.syntax import parse_program

_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_START = re.compile(r"^(?:def |async def |import |from |class |@)", re.MULTILINE)


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
            return parse_program("\n".join(lines[:end]))
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


def rename_lone_function(code: str, name: str) -> str:
    """Code whose only top-level function is not called `name`, with that function renamed to
    `name` (its own recursive calls too); any other code is returned unchanged."""
    if not code:
        return code
    tree = parse_program(code)
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if len(funcs) != 1 or funcs[0].name == name:
        return code
    old = funcs[0].name
    funcs[0].name = name
    for node in ast.walk(funcs[0]):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = name
    return ast.unparse(tree)


def agent_code(
    text: str, problem: Problem, roles: Roles, agent: str, *, rename_lone_helper: bool
) -> str:
    """Extract the code an agent contributes; helpers may not define main, main may not define helpers.

    With `rename_lone_helper`, a helper's single function under another name (`def first_letter`
    where `aux` was asked for) is taken as its helper (env params `rename_lone_helper`)."""
    helper_names = [spec.name for spec in problem.helpers]
    if agent == roles.main:
        return extract_code(text, keep=[problem.main.name], drop=helper_names)
    own = problem.helpers[roles.helpers.index(agent)].name
    others = [n for n in helper_names if n != own]
    code = extract_code(text, keep=[own], drop=[problem.main.name, *others])
    return rename_lone_function(code, own) if rename_lone_helper else code
