"""Tests a constant answer already passes, and the test pass rate a constant cannot earn (issue #57).

The plain test pass rate counts every assert. After 500 MAGRPO steps, 30% of the team's unseen
problem-runs scored exactly one assert of six, typically the empty-input case, which a program
answering `[]` passes without reading its input. A test is *trivial* for a problem when one of the
constant programs passes it: the entry point returning `None`, `[]`, `{}`, `0`, `""` or `False`
whatever it is given, or its first argument unchanged (the helpers keep their references, so a
test's setup that reads them still loads). The robust pass rate is the fraction of a program's
non-trivial tests it passes; every constant program scores 0 on it by construction, and a problem
whose tests are all trivial has none (None), which the mean leaves out and reports by count.

Deciding which tests are trivial runs the constant programs in the real sandbox, once per problem
(7 programs); scoring a program afterwards needs only its `TestReport.passed`.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestry.envs.code.problems import Problem
from orchestry.envs.code.sandbox import SandboxJob, SandboxLimits, run_many

CONSTANT_ANSWERS: tuple[str, ...] = ("None", "[]", "{}", "0", '""', "False")
"""What a constant entry point returns (Python source), beside the identity below."""
IDENTITY = "args[0] if args else None"
"""The input unchanged: the entry point returning its first argument."""


def constant_programs(problem: Problem) -> list[str]:
    """The programs whose passes make a test trivial: helpers' references, then an entry point
    that returns one constant (or its first argument) whatever it is given."""
    helpers = "\n\n".join(spec.reference.strip("\n") for spec in problem.helpers if spec.reference)
    head = f"{helpers}\n\n\n" if helpers else ""
    return [
        f"{head}def {problem.entry_point}(*args, **kwargs):\n    return {answer}\n"
        for answer in (*CONSTANT_ANSWERS, IDENTITY)
    ]


def trivial_tests(
    problems: Sequence[Problem], limits: SandboxLimits, workers: int
) -> dict[str, tuple[bool, ...]]:
    """Problem id -> one flag per test: True where some constant program passes it."""
    programs = [constant_programs(p) for p in problems]
    jobs = [
        SandboxJob(program=program, tests=p.tests, setup=p.setup, entry_point=p.entry_point)
        for p, mine in zip(problems, programs, strict=True)
        for program in mine
    ]
    reports = iter(run_many(jobs, limits, workers))
    out: dict[str, tuple[bool, ...]] = {}
    for p, mine in zip(problems, programs, strict=True):
        flags = [False] * len(p.tests)
        for _ in mine:
            report = next(reports)
            flags = [f or passed for f, passed in zip(flags, report.passed, strict=True)]
        out[p.id] = tuple(flags)
    return out


def robust_pass_rate(passed: Sequence[bool], trivial: Sequence[bool]) -> float | None:
    """The fraction of the non-trivial tests passed; None when every test is trivial."""
    if len(passed) != len(trivial):
        raise ValueError(f"{len(passed)} test results for {len(trivial)} tests")
    kept = [ok for ok, free in zip(passed, trivial, strict=True) if not free]
    return sum(kept) / len(kept) if kept else None
