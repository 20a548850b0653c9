"""The level reward on hand-written joint actions (AST facts + real sandbox reports)."""

import ast

import pytest

from orchestry.envs.code.reward import (
    RewardWeights,
    code_facts,
    find_function,
    is_thin_wrapper,
    level_reward,
)
from orchestry.envs.code.sandbox.runner import TestReport

W = RewardWeights()
AUX = "def aux(x):\n    return x * 2\n"
MAIN = "def main(xs):\n    total = 0\n    for x in xs:\n        total += aux(x)\n    return total\n"


def report(passed):
    return TestReport(
        passed=tuple(passed),
        first_failure=None,
        syntax_error=None,
        load_error=None,
        timed_out=False,
        output="",
    )


def facts(aux, main):
    return code_facts([aux], ["aux"], main, "main")


def test_full_marks_for_cooperating_pair_that_passes():
    r = level_reward(facts(AUX, MAIN), report([True, True, True]), W)
    assert r.total == pytest.approx(4.0)
    assert (r.structure, r.syntax, r.tests, r.cooperation) == pytest.approx((1.0, 0.5, 1.0, 1.5))


def test_missing_main_gates_everything_but_aux_structure():
    r = level_reward(facts(AUX, "def other():\n    return 1\n"), None, W)
    assert r.total == pytest.approx(0.4)
    r = level_reward(facts(AUX, "def main(xs):\n    print(xs)\n"), None, W)  # no return value
    assert r.total == pytest.approx(0.4)


def test_aux_without_return_does_not_gate():
    r = level_reward(facts("def aux(x):\n    pass\n", MAIN), report([True, False]), W)
    assert r.structure == pytest.approx(0.6)
    assert r.tests == pytest.approx(0.5)
    assert r.cooperation == 0.0  # aux does not exist as a value-returning function


def test_unparsable_program_gates_tests():
    r = level_reward(facts("def aux(x:\n    return 1\n", MAIN), None, W)
    assert (r.structure, r.syntax, r.total) == pytest.approx((0.6, 0.0, 0.6))


def test_no_passing_test_means_no_cooperation_bonus():
    r = level_reward(facts(AUX, MAIN), report([False, False]), W)
    assert r.total == pytest.approx(1.5)


def test_thin_wrapper_gets_only_the_call_bonus():
    thin = "def main(xs):\n    '''doc'''\n    return aux(xs)\n"
    r = level_reward(facts(AUX, thin), report([True, False]), W)
    assert r.cooperation == pytest.approx(0.5)
    assign = "def main(xs):\n    y = aux(xs)\n    return y\n"
    assert facts(AUX, assign).thin_wrapper


def test_ignored_aux_result_is_penalised():
    main = "def main(xs):\n    aux(xs)\n    return sum(xs)\n"
    r = level_reward(facts(AUX, main), report([True]), W)
    assert r.cooperation == pytest.approx(0.5 + 1.0 - 0.5)


def test_aux_passed_as_key_function_counts_as_a_call():
    main = "def main(xs):\n    return sorted(xs, key=aux)\n"
    f = facts(AUX, main)
    assert f.helpers[0].called and not f.thin_wrapper


def test_weights_come_from_settings():
    w = RewardWeights(
        aux_defined=1.0, main_defined=1.0, syntax=1.0, tests=2.0, coop_call=0.0, coop_nontrivial=0.0
    )
    r = level_reward(facts(AUX, MAIN), report([True, False]), w)
    assert r.total == pytest.approx(1 + 1 + 1 + 1.0)


def test_two_helpers_scale_shares():
    a1 = "def aux1(x):\n    return x\n"
    a2 = "def aux2(x):\n    pass\n"
    main = "def main(x):\n    return aux1(x) + 1\n"
    f = code_facts([a1, a2], ["aux1", "aux2"], main, "main")
    r = level_reward(f, report([True]), W)
    assert r.structure == pytest.approx(0.2 + 0.6)
    assert r.cooperation == pytest.approx((0.5 + 1.0) / 2)


def test_thin_wrapper_shapes():
    fn = find_function(ast.parse("def m(a):\n    x = aux(a)\n    return x + 1\n"), "m")
    assert not is_thin_wrapper(fn, ["aux"])
    fn = find_function(ast.parse("def m(a):\n    return aux(a) + 1\n"), "m")
    assert not is_thin_wrapper(fn, ["aux"])
    fn = find_function(ast.parse("def m(a, b, c):\n    return aux(aux(a, b), c)\n"), "m")
    assert not is_thin_wrapper(fn, ["aux"])  # composes aux: coordination, not forwarding
    fn = find_function(ast.parse("def m(a):\n    return aux(a, 2, key=a)\n"), "m")
    assert is_thin_wrapper(fn, ["aux"])


def test_every_coop_reference_pair_gets_full_marks():
    from pathlib import Path

    from orchestry.envs.code.problems import load_problem_dir
    from orchestry.envs.code.reward import JointAction, score_joint_actions
    from orchestry.envs.code.sandbox.runner import SandboxLimits

    problems = load_problem_dir(Path(__file__).resolve().parents[2] / "data/coop")
    actions = [JointAction(p, (p.helpers[0].reference,), p.main.reference) for p in problems]
    scored = score_joint_actions(actions, W, SandboxLimits(), workers=2)
    totals = {p.id: r.total for p, (r, _) in zip(problems, scored, strict=True)}
    assert totals == pytest.approx(dict.fromkeys(totals, 4.0))
