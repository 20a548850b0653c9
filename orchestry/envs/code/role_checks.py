"""Each role checked on its own, beside the team's reward: is aux right, and would main be right with
a right aux? These separate "the helper is wrong" from "main does not use the helper well".

- aux correct: the helper's code alone passes every unit test derived from the reference run
  (`unit_tests.py`); with several helpers, the share of helpers that do. n/a (None) when the problem
  has no derived helper tests (HumanEval).
- main correct given a correct aux: main's code joined with the reference helpers passes every test
  of the problem. n/a when a helper has no reference.

Neither enters the reward: they are instruments for the logs and the metrics. Identical programs in
one batch run once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestry.envs.code.reward import JointAction, joint_program
from orchestry.envs.code.sandbox import SandboxJob, SandboxLimits, TestReport, run_many

UNIT_TEST_SETUP = "import math"
"""Derived unit tests compare floats with math.isclose."""


@dataclass(frozen=True)
class RoleChecks:
    aux_correct: float | None
    """Share of helpers whose code alone passes its derived unit tests; None = n/a."""
    main_correct_with_reference_aux: bool | None
    """Main joined with the reference helpers passes every test; None = n/a."""


def _aux_job(code: str, tests: tuple[str, ...]) -> SandboxJob:
    return SandboxJob(program=code + "\n", tests=tests, setup=UNIT_TEST_SETUP)


def check_roles(
    actions: Sequence[JointAction], limits: SandboxLimits, workers: int
) -> list[RoleChecks]:
    """Role checks of many joint actions, run in the sandbox in one parallel batch."""
    jobs, finish = plan_role_checks(actions)
    return finish(run_many(jobs, limits, workers))


def plan_role_checks(
    actions: Sequence[JointAction],
) -> tuple[list[SandboxJob], Callable[[Sequence[TestReport]], list[RoleChecks]]]:
    """(the distinct sandbox jobs the role checks need, `finish(their reports) -> checks`)."""
    jobs: dict[SandboxJob, int] = {}

    def job_index(job: SandboxJob) -> int:
        return jobs.setdefault(job, len(jobs))

    plans: list[tuple[list[int | None] | None, int | None | bool]] = []
    for action in actions:
        problem, facts = action.problem, action.facts()
        aux_plan: list[int | None] | None = None
        if all(h.unit_tests for h in problem.helpers):
            aux_plan = [
                job_index(_aux_job(code, h.unit_tests)) if f.defined else None
                for code, h, f in zip(
                    action.helper_codes, problem.helpers, facts.helpers, strict=True
                )
            ]
        main_plan: int | None | bool = None  # None = n/a, False = cannot pass, int = job
        if all(h.reference for h in problem.helpers):
            main_plan = False
            if facts.main_defined:
                program = joint_program([h.reference for h in problem.helpers], action.main_code)
                main_plan = job_index(
                    SandboxJob(program, problem.tests, problem.setup, problem.main.name)
                )
        plans.append((aux_plan, main_plan))

    def finish(reports: Sequence[TestReport]) -> list[RoleChecks]:
        passed = [bool(r.passed) and all(r.passed) for r in reports]
        out = []
        for aux_plan, main_plan in plans:
            aux = None
            if aux_plan is not None:
                aux = sum(i is not None and passed[i] for i in aux_plan) / len(aux_plan)
            main = main_plan if main_plan is None or main_plan is False else passed[main_plan]
            out.append(RoleChecks(aux, main))
        return out

    return list(jobs), finish
