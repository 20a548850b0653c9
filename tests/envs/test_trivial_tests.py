"""The robust test pass rate (issue #57): tests a constant answer passes do not count, so every
constant program scores 0 on it and every reference 1, checked in the real sandbox."""

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import limits

from orchestry.envs.code.generated import generate_problems
from orchestry.envs.code.humaneval import load_humaneval
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.code.sandbox import SandboxJob, run_many
from orchestry.envs.code.trivial_tests import (
    constant_programs,
    robust_pass_rate,
    trivial_tests,
)

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2


def test_the_rate_leaves_out_trivial_tests():
    assert robust_pass_rate([True, True, False], [True, False, False]) == 0.5
    assert robust_pass_rate([True, False], [True, False]) == 0.0  # a pass of a trivial test: 0
    assert robust_pass_rate([True, True], [True, True]) is None  # nothing left to count
    with pytest.raises(ValueError, match="2 test results for 3 tests"):
        robust_pass_rate([True, True], [False, False, False])


def test_an_empty_answer_and_the_input_unchanged_make_a_test_trivial():
    (acronym,) = [p for p in load_problem_dir(ROOT / "data" / "coop") if p.id == "coop/acronym"]
    problem = replace(
        acronym,
        tests=(
            'assert candidate("") == ""',  # "" answers it
            'assert candidate("PNG") == "PNG"',  # the input unchanged answers it
            'assert candidate("portable network graphics") == "PNG"',
        ),
    )
    assert trivial_tests([problem], limits(), WORKERS) == {"coop/acronym": (True, True, False)}


def _problems():
    coop = load_problem_dir(ROOT / "data" / "coop")
    generated = generate_problems().problems
    by_set = {s: [p for p in generated if p.source == s] for s in ("gen", "gen_unseen")}
    picked = [*by_set["gen"][::200], *by_set["gen_unseen"][::60]]  # spread over the families
    return coop, picked, load_humaneval()[:6]


@pytest.mark.slow  # about 500 sandbox runs
def test_constant_programs_score_zero_and_references_one_in_the_sandbox():
    coop, generated, humaneval = _problems()
    problems = [*coop, *generated, *humaneval]
    trivial = trivial_tests(problems, limits(), WORKERS)
    programs = [(p, prog) for p in problems for prog in constant_programs(p)]
    programs += [(p, p.reference_program()) for p in problems]
    jobs = [
        SandboxJob(program=prog, tests=p.tests, setup=p.setup, entry_point=p.entry_point)
        for p, prog in programs
    ]
    rates = [
        robust_pass_rate(report.passed, trivial[p.id])
        for (p, _), report in zip(programs, run_many(jobs, limits(), WORKERS), strict=True)
    ]
    n_constant = 7 * len(problems)
    constant, reference = rates[:n_constant], rates[n_constant:]
    assert set(constant) <= {0.0, None}
    assert set(reference) <= {1.0, None}
    # every hand-written and generated problem keeps a test no constant passes
    keeps = {p.id: r for p, r in zip(problems, reference, strict=True)}
    assert all(keeps[p.id] == 1.0 for p in (*coop, *generated))
    # and some of their tests are trivial: the plain rate would have paid a constant for them
    assert sum(any(trivial[p.id]) for p in generated) >= len(generated) // 2
