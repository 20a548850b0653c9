"""Each role on its own: helper unit tests derived from the reference run, and the role checks."""

from dataclasses import replace

import pytest
from conftest import ROOT, limits

from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.code.reward import JointAction
from orchestry.envs.code.role_checks import check_roles
from orchestry.envs.code.unit_tests import MARK, calls_to_asserts, with_helper_tests


@pytest.fixture(scope="module")
def problems():
    raw = load_problem_dir(ROOT / "data/coop") + load_problem_dir(ROOT / "data/coop3")
    return with_helper_tests(raw, limits(), workers=2)


def _action(problem, helpers, main):
    return JointAction(problem, tuple(helpers), main)


def test_every_reference_helper_gets_unit_tests_that_it_passes(problems):
    assert all(1 <= len(h.unit_tests) <= 8 for p in problems for h in p.helpers)
    refs = [_action(p, [h.reference for h in p.helpers], p.main.reference) for p in problems]
    checks = check_roles(refs, limits(), workers=2)
    assert all(c.aux_correct == 1.0 for c in checks), [
        p.id for p, c in zip(problems, checks, strict=True) if c.aux_correct != 1.0
    ]
    assert all(c.main_correct_with_reference_aux is True for c in checks)


def test_acronym_tests_are_the_recorded_calls(problems):
    acronym = next(p for p in problems if p.id == "coop/acronym")
    assert acronym.helpers[0].unit_tests[:2] == (
        "assert aux('portable') == 'P'",
        "assert aux('network') == 'N'",
    )


def test_a_wrong_aux_fails_and_main_is_judged_with_the_reference_aux(problems):
    p = next(p for p in problems if p.id == "coop/acronym")
    wrong_aux = "def aux(word):\n    return word[:1]\n"  # not upper-cased, no skipping
    good_main, bad_main = p.main.reference, "def acronym(phrase):\n    return phrase\n"
    both = check_roles(
        [_action(p, [wrong_aux], good_main), _action(p, [wrong_aux], bad_main)], limits(), 2
    )
    assert both[0].aux_correct == 0.0 and both[0].main_correct_with_reference_aux is True
    assert both[1].main_correct_with_reference_aux is False
    missing = check_roles([_action(p, [""], "")], limits(), 2)[0]
    assert missing.aux_correct == 0.0 and missing.main_correct_with_reference_aux is False


def test_three_role_problems_score_each_helper(problems):
    p = next(p for p in problems if p.source == "coop3")
    half = [p.helpers[0].reference, "def aux2(*a):\n    return None\n"]
    (check,) = check_roles([_action(p, half, p.main.reference)], limits(), 2)
    assert check.aux_correct == 0.5


def test_no_reference_means_not_applicable(problems):
    p = problems[0]
    bare = replace(p, helpers=tuple(replace(h, unit_tests=()) for h in p.helpers))
    no_ref = replace(bare, helpers=tuple(replace(h, reference="") for h in bare.helpers))
    assert with_helper_tests([no_ref], limits(), 2) == [no_ref]
    (check,) = check_roles(
        [_action(no_ref, [p.helpers[0].reference], p.main.reference)], limits(), 2
    )
    assert check.aux_correct is None and check.main_correct_with_reference_aux is None


def test_only_literal_calls_become_tests():
    sep = "\x1f"
    out = "\n".join(
        [
            sep.join([MARK, "aux", "(1, 2)", "{}", "3"]),
            sep.join([MARK, "aux", "(1, 2)", "{}", "3"]),  # a repeat is kept once
            sep.join([MARK, "aux", "(<object at 0x1>,)", "{}", "3"]),  # not a literal
            sep.join([MARK, "aux", "(0.5,)", "{'k': 2}", "0.25"]),
            "print output of the program",
        ]
    )
    assert calls_to_asserts(out, ["aux"]) == {
        "aux": (
            "assert aux(1, 2) == 3",
            "assert math.isclose(aux(0.5, k=2), 0.25, rel_tol=1e-9, abs_tol=1e-12)",
        )
    }


def test_a_reference_failing_its_own_tests_is_refused(problems):
    p = problems[0]
    broken = replace(p, main=replace(p.main, reference=p.main.reference + "\n    return None\n"))
    broken = replace(broken, tests=("assert False",) + p.tests[1:])
    with pytest.raises(ValueError, match=f"problem '{p.id}'.*fails its own tests"):
        with_helper_tests([broken], limits(), 2)


def test_derived_unit_tests_survive_the_prepared_file(problems):
    import json

    from orchestry.envs.code.problems import problem_from_dict, problem_to_dict

    for p in problems[:3]:
        assert problem_from_dict(json.loads(json.dumps(problem_to_dict(p)))) == p


def test_env_score_runs_rewards_and_role_checks_in_one_batch_with_the_same_results(problems):
    """CodeEnv.score plans both kinds of jobs and runs them together; the outcomes are those of
    scoring and checking separately. A hanging main runs into its timeout in both batches."""
    from orchestry.envs.base import Roles
    from orchestry.envs.code.env import CodeEnv
    from orchestry.envs.code.reward import RewardWeights, score_joint_actions

    weights = RewardWeights(
        aux_defined=0.4,
        main_defined=0.6,
        syntax=0.5,
        tests=1.0,
        coop_call=0.5,
        coop_nontrivial=1.0,
        ignored_penalty=0.5,
        coop_gate="any",
    )
    two_role = [p for p in problems if len(p.helpers) == 1][:3]
    lim = limits(timeout_s=2.0, cpu_s=2)
    hang = f"def {two_role[0].main.name}(*args):\n    while args:\n        pass\n    return ''\n"
    actions = [_action(p, [p.helpers[0].reference], p.main.reference) for p in two_role]
    actions += [_action(two_role[0], [two_role[0].helpers[0].reference], hang)]
    actions += [_action(two_role[1], ["def aux(x):\n    return x\n"], two_role[1].main.reference)]
    env = CodeEnv(
        Roles.from_agents(["aux", "main"]),
        weights,
        lim,
        2,
        rename_lone_helper=False,
        single_prompt="plain",
    )
    outcomes = env.score(
        [(a.problem, {"aux": a.helper_codes[0], "main": a.main_code}) for a in actions]
    )
    scored = score_joint_actions(actions, weights, lim, 2)
    checks = check_roles(actions, lim, 2)
    assert [o.total for o in outcomes] == [r.total for r, _ in scored]
    assert [o.record["aux_correct"] for o in outcomes] == [c.aux_correct for c in checks]
    assert [o.record["main_correct_ref_aux"] for o in outcomes] == [
        c.main_correct_with_reference_aux for c in checks
    ]
    assert [o.record["n_passed"] for o in outcomes] == [r.n_passed if r else 0 for _, r in scored]
    assert outcomes[0].record["correct"] and not outcomes[3].record["correct"]
    assert outcomes[3].record["main_correct_ref_aux"] is False  # the hanging main, both times
    assert outcomes[4].record["aux_correct"] == 0.0
