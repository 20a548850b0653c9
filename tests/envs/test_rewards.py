"""The level reward on hand-written joint actions (AST facts + real sandbox reports)."""

import pytest
from conftest import limits, weights

from orchestry.analysis.schemes import SCHEMES, classify_pair
from orchestry.envs.code.reward import code_facts, level_reward
from orchestry.envs.code.sandbox import TestReport

W = weights()
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


@pytest.mark.parametrize(
    "gate,passed,bonus",
    [
        ("any", [True, False, False, False], 1.5),  # the paper: one passing test pays it all
        ("scaled", [True, False, False, False], 1.5 * 0.25),
        ("scaled", [True, True, True, True], 1.5),
        ("all", [True, True, True, False], 0.0),
        ("all", [True, True, True, True], 1.5),
        ("scaled", [False, False], 0.0),
    ],
)
def test_the_cooperation_gate_pays_the_bonus_by_tests_passed(gate, passed, bonus):
    r = level_reward(facts(AUX, MAIN), report(passed), weights(coop_gate=gate))
    assert r.cooperation == pytest.approx(bonus)
    # the penalty for an ignored helper is not gated
    ignored = "def main(xs):\n    aux(xs)\n    return sum(xs)\n"
    r = level_reward(facts(AUX, ignored), report(passed), weights(coop_gate=gate))
    assert r.cooperation == pytest.approx(-0.5)


def test_thin_wrapper_gets_only_the_call_bonus():
    thin = "def main(xs):\n    '''doc'''\n    return aux(xs)\n"
    r = level_reward(facts(AUX, thin), report([True, False]), W)
    assert r.cooperation == pytest.approx(0.5)
    assign = "def main(xs):\n    y = aux(xs)\n    return y\n"
    assert facts(AUX, assign).thin_wrapper


def test_ignored_aux_result_is_penalised():
    # aux's value is never used: not a call that cooperates (no bonus), and the penalty.
    main = "def main(xs):\n    aux(xs)\n    return sum(xs)\n"
    r = level_reward(facts(AUX, main), report([True]), W)
    assert r.cooperation == pytest.approx(-0.5)
    assert not r.main_calls_aux
    unread = "def main(xs):\n    r = aux(xs)\n    return sum(xs)\n"
    assert level_reward(facts(AUX, unread), report([True]), W).cooperation == pytest.approx(-0.5)
    # One dropped call next to one whose value is used: main uses aux, no penalty.
    both = "def main(x):\n    aux(x)\n    return aux(x) + 1\n"
    assert level_reward(facts(AUX, both), report([True]), W).cooperation == pytest.approx(1.5)


def test_aux_passed_as_key_function_counts_as_a_call():
    main = "def main(xs):\n    return sorted(xs, key=aux)\n"
    f = facts(AUX, main)
    assert f.helpers[0].called and not f.thin_wrapper


def test_weights_come_from_settings():
    w = weights(
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
    def thin(main):
        return facts(AUX, main).thin_wrapper

    assert not thin("def main(a):\n    x = aux(a)\n    return x + 1\n")
    assert not thin("def main(a):\n    return aux(a) + 1\n")
    assert not thin("def main(a, b, c):\n    return aux(aux(a, b), c)\n")  # composes aux
    assert not thin("def main(a):\n    return aux(a.lower())\n")  # pre-processes its input
    assert thin("def main(a):\n    return aux(a, 2, key=a)\n")
    assert thin("def main(a):\n    f = aux\n    return f(a)\n")  # an alias forwards all the same
    assert thin("async def main(a):\n    r = await aux(a)\n    return r\n")


def test_every_coop_reference_pair_gets_full_marks():
    from pathlib import Path

    from orchestry.envs.code.problems import load_problem_dir
    from orchestry.envs.code.reward import JointAction, score_joint_actions

    problems = load_problem_dir(Path(__file__).resolve().parents[2] / "data/coop")
    actions = [JointAction(p, (p.helpers[0].reference,), p.main.reference) for p in problems]
    scored = score_joint_actions(actions, W, limits(), workers=2)
    totals = {p.id: r.total for p, (r, _) in zip(problems, scored, strict=True)}
    assert totals == pytest.approx(dict.fromkeys(totals, 4.0))


# --- the reward and the scheme classifier share one definition of "main uses aux" ---------------

# (main, the classifier's primary label); aux is AUX, defined with a return.
AGREEMENT_PAIRS = {
    "alias": ("def main(x):\n    f = aux\n    return f(x)\n", "thin_wrapper"),
    "module_alias": ("f = aux\n\n\ndef main(x):\n    return f(x)\n", "thin_wrapper"),
    "thin": ("def main(x):\n    '''Doc.'''\n    return aux(x)\n", "thin_wrapper"),
    "ignored_statement": ("def main(x):\n    aux(x)\n    return x\n", "ignored_result"),
    "ignored_variable": ("def main(x):\n    r = aux(x)\n    return x\n", "ignored_result"),
    "nested_wrapper": (
        "def main(xs):\n    def g(v):\n        return aux(v) + 1\n\n    return [g(x) for x in xs]\n",
        "coordinator",
    ),
    "module_wrapper": (
        "def g(v):\n    return aux(v) * 2\n\n\ndef main(x):\n    return g(x)\n",
        "decorator",
    ),
    "dead_after_return": ("def main(x):\n    return x * 2\n    return aux(x) + 1\n", "no_call"),
    "dead_if_false": (
        "def main(x):\n    if False:\n        return aux(x) + 1\n    return x\n",
        "no_call",
    ),
    "shadowing_parameter": ("def main(x, aux):\n    return aux(x) + 1\n", "no_call"),
    "shadowing_def": (
        "def main(x):\n    def aux(v):\n        return v\n\n    return aux(x) * 2\n",
        "no_call",
    ),
    "decorator": ("def main(s):\n    return aux(s.strip()).upper()\n", "decorator"),
    "coordinator": ("def main(xs):\n    return sum(aux(x) for x in xs)\n", "coordinator"),
    "strategy_filter": ("def main(xs):\n    return sorted(xs, key=aux)\n", "strategy_filter"),
    "fallback": (
        "def main(x):\n    try:\n        return aux(x)\n    except ValueError:\n        return -x\n",
        "fallback",
    ),
    "no_call": ("def main(x):\n    return x + 1\n", "no_call"),
    "closure_read": (
        "def main(x):\n    r = aux(x)\n\n    def g():\n        return r + 1\n\n    return g()\n",
        "decorator",
    ),
}


@pytest.mark.parametrize("case", sorted(AGREEMENT_PAIRS))
def test_reward_cooperation_agrees_with_the_scheme_classifier(case):
    main, expected = AGREEMENT_PAIRS[case]
    label = classify_pair(AUX, main, "aux", "main").primary
    assert label == expected  # the pair means what its name says
    r = level_reward(facts(AUX, main), report([True]), W)
    called, nontrivial = r.main_calls_aux, r.main_calls_aux and not r.thin_wrapper
    assert called == (label in (*SCHEMES, "thin_wrapper")), (case, label)
    assert nontrivial == (label in SCHEMES), (case, label)
    bonus = 0.5 * called + 1.0 * nontrivial - 0.5 * (label == "ignored_result")
    assert r.cooperation == pytest.approx(bonus), (case, label)


def test_each_helper_is_judged_on_its_own():
    a1 = "def aux1(x):\n    return x + 1\n"
    a2 = "def aux2(x):\n    return x * 2\n"

    def judged(main):
        f = code_facts([a1, a2], ["aux1", "aux2"], main, "main")
        return [h.main_use for h in f.helpers], level_reward(f, report([True]), W)

    uses, r = judged("def main(x):\n    return aux1(x)\n")
    assert uses == ["thin_wrapper", "no_call"]
    assert r.thin_wrapper and r.main_calls_aux and r.cooperation == pytest.approx(0.5 / 2)
    uses, r = judged("def main(x):\n    r = aux2(x)\n    return aux1(x) * 2\n")
    assert uses == ["uses", "ignored_result"]
    assert not r.thin_wrapper and r.cooperation == pytest.approx(1.5 / 2 - 0.5)
    uses, r = judged("def main(x):\n    return aux1(x) + aux2(x)\n")
    assert uses == ["uses", "uses"] and r.cooperation == pytest.approx(1.5)


def test_reward_modules_stay_out_of_analysis_agents_and_torch():
    import ast
    from pathlib import Path

    code_dir = Path(__file__).resolve().parents[2] / "orchestry/envs/code"
    for name in ("aux_use.py", "live_code.py", "reward.py"):
        tree = ast.parse((code_dir / name).read_text(encoding="utf-8"))
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        for module in imported:
            assert not module.startswith(("orchestry.analysis", "orchestry.agents", "torch")), name
