"""Unit tests for each helper, derived from the reference solution: what aux must return, call by call.

A problem's tests check the entry point only, so a wrong helper hides behind a main that works around it.
To check a helper on its own, the reference program runs in the sandbox on the problem's own tests
with every reference helper wrapped in a recorder; each recorded call (its arguments and the value the
reference helper returned) becomes an assert on the helper alone: `assert aux('ab c') == 'AC'`.
Only calls whose arguments and result are Python literals are kept (so the assert is exact and
self-contained), at most `MAX_TESTS` distinct ones per helper, in the order the tests made them.
A problem whose helpers have no reference (HumanEval) gets none: its "aux correct" is n/a.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import replace

from orchestry.envs.code.problems import Problem
from orchestry.envs.code.sandbox import SandboxJob, SandboxLimits, TestReport, run_many

MAX_TESTS = 8
"""Distinct recorded calls kept per helper."""
MAX_LITERAL = 300
"""Longest repr of an argument list or result kept (the assert must stay readable)."""
MARK = "@@orchestry-aux-call@@"
_SEP = "\x1f"

# Appended to the reference program: rebinds each helper to a recorder that prints one line per call
# (its name, repr of args, kwargs and result), at most 200 lines per helper so the output cap holds.
_RECORDER = """

def __orchestry_record(__name, __fn):
    __count = [0]

    def __recorded(*args, **kwargs):
        __before = (repr(args), repr(kwargs))
        __result = __fn(*args, **kwargs)
        if __count[0] < 200:
            __count[0] += 1
            print({mark!r}, __name, __before[0], __before[1], repr(__result), sep={sep!r})
        return __result

    return __recorded


"""


def recording_program(problem: Problem) -> str:
    """The reference program with every helper wrapped in a call recorder."""
    wraps = "\n".join(
        f"{h.name} = __orchestry_record({h.name!r}, {h.name})" for h in problem.helpers
    )
    recorder = _RECORDER.format(mark=MARK, sep=_SEP)
    return problem.reference_program() + recorder + wraps + "\n"


def _literal(text: str) -> object:
    """The value of a literal repr; ValueError when it is not one (objects, functions...)."""
    if len(text) > MAX_LITERAL:
        raise ValueError("too long")
    return ast.literal_eval(text)


def _assert_line(name: str, args: tuple, kwargs: dict, result: object) -> str:
    call = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
    if isinstance(result, float) and math.isfinite(result):
        return f"assert math.isclose({name}({call}), {result!r}, rel_tol=1e-9, abs_tol=1e-12)"
    return f"assert {name}({call}) == {result!r}"


def calls_to_asserts(output: str, helper_names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Per helper, the asserts made of the recorded calls in the sandbox output."""
    found: dict[str, list[str]] = {name: [] for name in helper_names}
    for line in output.splitlines():
        if not line.startswith(MARK):
            continue
        parts = line.split(_SEP)
        if len(parts) != 5 or parts[1] not in found:
            continue
        _, name, args_text, kwargs_text, result_text = parts
        try:
            args, kwargs, result = (_literal(t) for t in (args_text, kwargs_text, result_text))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(result, float) and not math.isfinite(result):
            continue
        test = _assert_line(name, args, kwargs, result)  # type: ignore[arg-type]
        if test not in found[name] and len(found[name]) < MAX_TESTS:
            found[name].append(test)
    return {name: tuple(tests) for name, tests in found.items()}


def with_helper_tests(
    problems: Sequence[Problem], limits: SandboxLimits, workers: int
) -> list[Problem]:
    """The problems with each helper's `unit_tests` derived from a recorded reference run.

    Raises ValueError naming the problem when its reference program fails its own tests (the
    recorded values would not be trustworthy)."""
    derivable = [p for p in problems if all(h.reference for h in (*p.helpers, p.main))]
    jobs = [
        SandboxJob(
            program=recording_program(p), tests=p.tests, setup=p.setup, entry_point=p.main.name
        )
        for p in derivable
    ]
    reports: dict[str, TestReport] = {
        p.id: r for p, r in zip(derivable, run_many(jobs, limits, workers), strict=True)
    }
    out = []
    for p in problems:
        report = reports.get(p.id)
        if report is None:
            out.append(p)
            continue
        if not all(report.passed):
            raise ValueError(
                f"problem {p.id!r}: the reference program fails its own tests under the call "
                f"recorder ({report.first_failure or report.load_error}); fix the problem file"
            )
        tests = calls_to_asserts(report.output, [h.name for h in p.helpers])
        helpers = tuple(replace(h, unit_tests=tests[h.name]) for h in p.helpers)
        out.append(replace(p, helpers=helpers))
    return out
