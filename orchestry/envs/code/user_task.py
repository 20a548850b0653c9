"""A code task from a user's message: what the served team (`orchestry/serve`) answers.

A user writes what the code sets' problems hold for the entry point — a function's `def` line and
docstring, fenced or not — and the team writes it, the helpers first designing their own functions
(the HumanEval form of `humaneval.py`: the helper's signature is open). The task carries no tests:
nothing is run, the joined program is the answer.
"""

from __future__ import annotations

import re

from orchestry.envs.code.humaneval import HUMANEVAL_AUX_SIGNATURE
from orchestry.envs.code.problems import FunctionSpec, Problem

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)
# Never run: the served task has no tests, but a Problem needs one snippet.
_NO_TESTS = ("assert callable(candidate)",)


class NoEntryPoint(ValueError):
    """The message names no function to write (no `def name(` line)."""


def helper_names(n_helpers: int) -> tuple[str, ...]:
    """The helpers' function names of an n-helper team, as the code sets name them."""
    return ("aux",) if n_helpers == 1 else tuple(f"aux{i + 1}" for i in range(n_helpers))


def task_from_message(text: str, n_helpers: int) -> Problem:
    """The task of a user's message: the entry point is the last `def` in it (the code in the
    first fenced block when there is one, else the whole message), its signature that code.
    Raises NoEntryPoint, naming what was expected, when the message defines no function."""
    fenced = _FENCE.search(text)
    code = (fenced.group(1) if fenced else text).strip("\n")
    names = _DEF.findall(code)
    if not names:
        raise NoEntryPoint(
            "the team model answers a function to write: the user message must hold its "
            "`def name(...):` line and docstring (as a code problem's entry point)"
        )
    name = names[-1]
    helpers = helper_names(n_helpers)
    if name in helpers:
        raise NoEntryPoint(
            f"the entry point may not be named {name!r}: the helpers write {helpers}"
        )
    # the def line normalised to `def name(`, as a Problem's signature must contain it
    signature = _DEF.sub(lambda m: m.group(0).replace(m.group(0).strip(), f"def {m[1]}("), code)
    open_helpers = tuple(
        FunctionSpec(h, HUMANEVAL_AUX_SIGNATURE.replace("def aux(", f"def {h}("), "")
        for h in helpers
    )
    return Problem(
        id=f"serve/{name}",
        # the closest shipped schema: coop3's helpers are aux1, aux2, ...; one open `aux`, HumanEval's
        source="coop3" if n_helpers > 1 else "humaneval",
        prompt=code,
        helpers=open_helpers,
        main=FunctionSpec(name, signature, ""),
        tests=_NO_TESTS,
    )
