"""Paired differences (team - method) and the paper's normalised columns, on hand-made rows."""

from __future__ import annotations

import dataclasses

import pytest

from orchestry.envs.code.aux_use import USES
from orchestry.envs.code.reward import CodeFacts, HelperFacts, RewardWeights, level_reward
from orchestry.envs.code.sandbox import TestReport
from orchestry.eval.metrics import bootstrap_ci
from orchestry.eval.normalised import max_cooperation, max_return, paper_columns
from orchestry.eval.paired import (
    COLUMNS,
    PER_PROBLEM,
    excludes_zero,
    heldout_set,
    paired_csv,
    paired_markdown,
    paired_rows,
    per_problem_csv,
    per_problem_rows,
)
from orchestry.params.schema import RewardParams

RESAMPLES = 400


def row(pid: str, correct: bool, pass_rate: float, calls: bool, total: float, coop: float = 0.0):
    return {
        "problem_id": pid,
        "correct": correct,
        "reward": {
            "total": total,
            "pass_rate": pass_rate,
            "main_calls_aux": calls,
            "cooperation": coop,
        },
    }


def method_rows(pids: list[str], score: float, n: int = 2) -> list[dict]:
    """n samples per problem, every one with the same reward `score` and half the tests passed."""
    return [row(p, score > 2, 0.5, True, score) for p in pids for _ in range(n)]


def pick(rows: list[dict], **where) -> dict:
    (found,) = [r for r in rows if all(r[k] == v for k, v in where.items())]
    return found


PIDS = [f"coop/p{i}" for i in range(6)]


def test_identical_methods_differ_by_zero_with_a_zero_ci() -> None:
    team = [row(p, i % 2 == 0, i / 6, i % 3 == 0, float(i)) for i, p in enumerate(PIDS)]
    out = paired_rows({"magrpo": team, "single": list(team)}, RESAMPLES, seed=0)
    assert {r["metric"] for r in out} == {"pass@1", "test_pass_rate", "coop_rate", "return"}
    for r in out:
        assert (r["diff"], r["ci_low"], r["ci_high"]) == (0.0, 0.0, 0.0)
        assert r["team_value"] == r["method_value"]
        assert not excludes_zero(r)


def test_a_method_worse_on_every_problem_has_its_ci_above_zero_and_a_better_one_below() -> None:
    team = method_rows(PIDS, 3.0)
    out = paired_rows(
        {"magrpo": team, "single": method_rows(PIDS, 1.0), "beam": method_rows(PIDS, 3.5)},
        RESAMPLES,
        seed=0,
    )
    worse = pick(out, heldout_set="all", metric="return", method="single")
    assert worse["diff"] == pytest.approx(2.0) and worse["ci_low"] > 0 and excludes_zero(worse)
    better = pick(out, heldout_set="all", metric="return", method="beam")
    assert better["diff"] == pytest.approx(-0.5) and better["ci_high"] < 0
    # pass@1: every team sample is correct (3.0 > 2), none of single's
    assert pick(out, heldout_set="all", metric="pass@1", method="single")["diff"] == 1.0


def test_pairing_finds_a_difference_that_the_marginal_cis_hide() -> None:
    """Problems of very different difficulty, the team a little better on each one."""
    base = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    pids = [f"coop/q{i}" for i in range(len(base))]
    lift = [0.1 if i % 2 else 0.2 for i in range(len(base))]
    team = [row(p, False, 0.5, False, b + d) for p, b, d in zip(pids, base, lift, strict=True)]
    other = [row(p, False, 0.5, False, b) for p, b in zip(pids, base, strict=True)]
    t_lo, t_hi = bootstrap_ci([b + d for b, d in zip(base, lift, strict=True)], RESAMPLES, 0)
    o_lo, o_hi = bootstrap_ci(base, RESAMPLES, 0)
    assert t_lo < o_hi and o_lo < t_hi  # the marginal CIs overlap
    out = paired_rows({"magrpo": team, "single": other}, RESAMPLES, 0)
    r = pick(out, heldout_set="all", metric="return")
    assert r["diff"] == pytest.approx(0.15)
    assert 0.1 - 1e-9 <= r["ci_low"] < r["ci_high"] <= 0.2 + 1e-9  # the paired one excludes 0


def test_each_heldout_set_is_compared_apart_and_all_pools_them() -> None:
    coop, humaneval = ["coop/a", "coop/b"], ["humaneval/HumanEval/0", "humaneval/HumanEval/1"]
    team = method_rows(coop, 3.0) + method_rows(humaneval, 1.0)
    other = method_rows(coop, 1.0) + method_rows(humaneval, 1.0)
    out = paired_rows({"magrpo": team, "single": other}, RESAMPLES, seed=0)
    assert [r["heldout_set"] for r in out if r["metric"] == "return"] == [
        "all",
        "coop",
        "humaneval",
    ]
    sets = {r["heldout_set"]: r for r in out if r["metric"] == "return"}
    assert sets["coop"]["diff"] == pytest.approx(2.0) and sets["coop"]["n_problems"] == 2
    assert sets["humaneval"]["diff"] == 0.0 and sets["humaneval"]["n_problems"] == 2
    assert sets["all"]["diff"] == pytest.approx(1.0) and sets["all"]["n_problems"] == 4


def test_only_the_problems_both_answered_count() -> None:
    team = method_rows(PIDS, 2.0, n=3) + method_rows(["gen/extra"], 4.0, n=3)
    other = method_rows(PIDS[:4], 1.0, n=2) + method_rows(["gen_unseen/x"], 0.0)
    out = paired_rows({"magrpo": team, "single": other}, RESAMPLES, seed=0)
    r = pick(out, heldout_set="all", metric="return")
    assert (r["n_problems"], r["n_samples"]) == (4, 2)  # samples: the fewer of the two
    assert r["team_value"] == 2.0 and r["diff"] == 1.0  # gen/extra's 4.0 left out
    # gen and gen_unseen are answered by one method each: no pair, no row
    assert {x["heldout_set"] for x in out} == {"all", "coop"}


def test_pass_at_1_is_the_fraction_correct_per_problem() -> None:
    team = [row("coop/a", i == 0, 1.0, True, 1.0) for i in range(4)]  # 1 of 4 correct
    team += [row("coop/b", True, 1.0, True, 1.0) for _ in range(4)]  # 4 of 4
    other = [row(p, False, 1.0, True, 1.0) for p in ("coop/a", "coop/b") for _ in range(4)]
    r = pick(
        paired_rows({"magrpo": team, "single": other}, RESAMPLES, 0),
        heldout_set="all",
        metric="pass@1",
    )
    assert r["team_value"] == pytest.approx((0.25 + 1.0) / 2)


def test_the_coop_rate_needs_a_passing_test() -> None:
    team = [row("coop/a", False, 0.0, True, 1.0), row("coop/b", False, 0.5, True, 1.0)]
    other = [row("coop/a", False, 0.5, False, 1.0), row("coop/b", False, 0.5, False, 1.0)]
    r = pick(
        paired_rows({"magrpo": team, "single": other}, RESAMPLES, 0),
        heldout_set="all",
        metric="coop_rate",
    )
    assert (r["team_value"], r["method_value"]) == (0.5, 0.0)


def test_text_rows_get_the_return_only() -> None:
    team = [
        {"problem_id": f"story/00{i}", "reward": {"total": 0.8, "judge": 0.5}} for i in range(3)
    ]
    other = [{**r, "reward": {"total": 0.5, "judge": 0.5}} for r in team]
    out = paired_rows({"magrpo": team, "single": other}, RESAMPLES, seed=0)
    assert [(r["heldout_set"], r["metric"]) for r in out] == [
        ("all", "return"),
        ("story", "return"),
    ]
    assert out[0]["diff"] == pytest.approx(0.3)


def test_rows_are_deterministic_by_seed_and_have_the_columns() -> None:
    t_totals, o_totals = [0.3, 1.7, 2.2, 0.9, 3.1, 1.4], [0.1, 0.4, 2.9, 0.2, 1.0, 1.3]
    team = [row(p, False, 0.5, False, t) for p, t in zip(PIDS, t_totals, strict=True)]
    other = [row(p, False, 0.5, False, o) for p, o in zip(PIDS, o_totals, strict=True)]
    methods = {"magrpo": team, "single": other}
    first = paired_rows(methods, RESAMPLES, seed=3)
    assert first == paired_rows(methods, RESAMPLES, seed=3)
    assert first != paired_rows(methods, RESAMPLES, seed=4)  # the CI bounds move
    assert all(tuple(r) == COLUMNS for r in first)
    lines = paired_csv(first).splitlines()
    assert lines[0] == ",".join(COLUMNS) and len(lines) == 1 + len(first)
    assert lines[1].startswith("all,6,1,pass@1,single,")


def test_bad_inputs_fail_loudly() -> None:
    with pytest.raises(ValueError, match="'<source>/<name>'"):
        heldout_set("count_evens")
    with pytest.raises(ValueError, match="no rows of the team 'magrpo'"):
        paired_rows({"single": method_rows(PIDS, 1.0)}, RESAMPLES, 0)
    apart = {"magrpo": method_rows(["coop/a"], 1.0), "single": method_rows(["coop/b"], 1.0)}
    with pytest.raises(ValueError, match="magrpo and single answered no problem in common"):
        paired_rows(apart, RESAMPLES, 0)


def test_the_markdown_marks_the_rows_whose_ci_excludes_zero() -> None:
    out = paired_rows(
        {"magrpo": method_rows(PIDS, 3.0), "single": method_rows(PIDS, 3.0)}, RESAMPLES, 0
    ) + paired_rows(
        {"magrpo": method_rows(PIDS, 3.0), "beam": method_rows(PIDS, 1.0)}, RESAMPLES, 0
    )
    md = paired_markdown(out, {"single": "Single model"}).splitlines()
    assert md[0] == (
        "## Paired differences (team − method, 95% paired bootstrap CI over the same problems)"
    )
    body = [line for line in md if line.startswith("| all ")]
    single = [line for line in body if "| Single model |" in line]
    beam = [line for line in body if "| beam |" in line and "| return |" in line]
    assert single and all("*" not in line for line in single)
    assert beam == [
        "| all | 6 | 2 | return | beam | 3.000 | 1.000 | **+2.000** | **[+2.000, +2.000]** * |"
    ]


# the paper's normalised columns


def weights() -> dict[str, float]:
    return RewardParams().model_dump()


def test_the_maxima_come_from_the_weights() -> None:
    assert max_return(weights()) == pytest.approx(4.0)
    assert max_cooperation(weights()) == pytest.approx(1.5)
    assert max_return({**weights(), "tests": 2.0}) == pytest.approx(5.0)


@pytest.mark.parametrize("w", [weights(), {**weights(), "coop_nontrivial": 2.0, "syntax": 0.2}])
def test_the_maximum_is_the_level_reward_of_a_perfect_joint_action(w) -> None:
    """Ties normalised.max_return to envs/code/reward.py: a change in the levels breaks this."""
    fields = {f.name for f in dataclasses.fields(RewardWeights)}
    facts = CodeFacts(helpers=(HelperFacts("aux", True, USES),), main_defined=True, parses=True)
    report = TestReport((True, True), None, None, None, False, "")
    best = level_reward(facts, report, RewardWeights(**{k: w[k] for k in fields}))
    assert best.total == pytest.approx(max_return(w))
    assert best.cooperation == pytest.approx(max_cooperation(w))


def test_paper_columns_on_hand_made_numbers() -> None:
    rows = [
        row("coop/a", True, 1.0, True, 4.0, coop=1.5),
        row("coop/a", False, 0.5, True, 2.0, coop=0.5),  # problem a: total 3.0, pass 0.75, coop 1.0
        row(
            "coop/b", False, 0.0, False, 1.0, coop=-0.5
        ),  # problem b: total 1.0, pass 0.0, coop -0.5
    ]
    cols = paper_columns(rows, weights())
    assert cols["return_pct"] == pytest.approx(100 * 2.0 / 4.0)
    assert cols["tests_pct"] == pytest.approx(100 * 0.375)
    assert cols["coop_pct"] == pytest.approx(100 * 0.25 / 1.5)
    with pytest.raises(ValueError, match="no rows"):
        paper_columns([], weights())


def test_per_problem_rows_hold_each_methods_problem_means() -> None:
    team = method_rows(PIDS[:2], 3.0, n=3) + [row("humaneval/HumanEval/0", False, 0.25, False, 1.0)]
    rows = per_problem_rows(
        {"magrpo": team, "story": [{"problem_id": "story/001", "reward": {"total": 0.5}}]}
    )
    first = pick(rows, method="magrpo", problem_id="coop/p0")
    assert first["n_samples"] == 3 and first["heldout_set"] == "coop"
    assert first["pass@1"] == 1.0 and first["test_pass_rate"] == 0.5 and first["return"] == 3.0
    assert pick(rows, problem_id="humaneval/HumanEval/0")["heldout_set"] == "humaneval"
    text = pick(rows, method="story")
    assert text["return"] == 0.5 and text["pass@1"] is None
    table = per_problem_csv(rows).splitlines()
    assert table[0].split(",") == list(PER_PROBLEM) and len(table) == 1 + len(rows)
    assert table[-1] == "story,story,story/001,1,,,,,0.500000,"


def test_the_robust_rate_pairs_only_problems_both_methods_have_it_on() -> None:
    """robust_test_pass_rate: None (every assert trivial) and rows from before the rate are left
    out per problem; a method with no such rows at all gets no robust row."""

    def robust(rows: list[dict], rates: dict[str, float | None]) -> list[dict]:
        return [{**r, "robust_pass_rate": rates[r["problem_id"]]} for r in rows]

    rates = {p: 0.5 for p in PIDS} | {PIDS[0]: None}
    team = robust(method_rows(PIDS, 3.0), rates)
    single = robust(method_rows(PIDS, 1.0), {**rates, PIDS[1]: 0.0})
    out = paired_rows({"magrpo": team, "single": single, "old": method_rows(PIDS, 1.0)}, 400, 0)
    (r,) = [r for r in out if r["metric"] == "robust_test_pass_rate" and r["heldout_set"] == "all"]
    assert r["method"] == "single" and r["n_problems"] == len(PIDS) - 1  # PIDS[0]: all trivial
    assert r["team_value"] == 0.5 and r["diff"] == pytest.approx(0.5 / (len(PIDS) - 1))
    assert {r["method"] for r in out if r["metric"] == "test_pass_rate"} == {"single", "old"}
    per = per_problem_rows({"magrpo": team, "old": method_rows(PIDS, 1.0)})
    assert pick(per, method="magrpo", problem_id=PIDS[1])["robust_test_pass_rate"] == 0.5
    assert pick(per, method="magrpo", problem_id=PIDS[0])["robust_test_pass_rate"] is None
    assert pick(per, method="old", problem_id=PIDS[1])["robust_test_pass_rate"] is None
