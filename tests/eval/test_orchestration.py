"""The orchestrate stage's numbers on hand-made episodes: return = reward - λ·cost, and the verdict."""

import pytest

from orchestry.eval.orchestration import paired_difference, results_table, summarize, verdict


def rows(rewards_costs, correct=None):
    """Two samples per problem: [(problem, reward, cost), ...]."""
    out = []
    for i, (p, r, c) in enumerate(rewards_costs):
        row = {"problem_id": p, "reward": r, "cost": c, "calls": 2}
        if correct is not None:
            row["correct"] = correct[i]
        out.append(row)
    return out


def test_return_is_reward_minus_weighted_cost_averaged_per_problem_first():
    r = rows([("a", 1.0, 100), ("a", 0.0, 100), ("b", 1.0, 50)], correct=[1.0, 0.0, 1.0])
    s = summarize(r, 0.01, 200, 0)
    # per problem: a -> reward 0.5, cost 100, return -0.5; b -> reward 1, cost 50, return 0.5
    assert s["reward_mean"] == pytest.approx(0.75) and s["cost_mean"] == pytest.approx(75)
    assert s["return_mean"] == pytest.approx(0.0) and s["correct_mean"] == pytest.approx(0.75)
    assert s["episodes"] == 3 and s["return_ci95"][0] <= 0 <= s["return_ci95"][1]
    assert "correct_mean" not in summarize(rows([("a", 1.0, 1)]), 0.0, 10, 0)


def test_difference_is_paired_by_problem():
    a = rows([("a", 1.0, 10), ("b", 2.0, 10), ("c", 9.0, 10)])
    b = rows([("a", 0.5, 20), ("b", 1.5, 20)])
    d = paired_difference(a, b, "reward", 0.0, 100, 0)
    assert d["mean"] == pytest.approx(0.5) and d["ci95"] == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError, match="no problem in common"):
        paired_difference(a, rows([("z", 0.0, 1)]), "reward", 0.0, 10, 0)


def test_verdict_against_the_best_fixed_order():
    probs = [f"p{i}" for i in range(6)]
    cheap_good = rows([(p, 1.0, 10) for p in probs])
    dear_good = rows([(p, 1.0, 100) for p in probs])
    poor = rows([(p, 0.2, 10) for p in probs])
    fixed = {"team": dear_good, "sequential": poor}
    # λ = 0: the best fixed is the team (reward 1); same return, lower cost -> cheaper and as good
    v0 = verdict(cheap_good, fixed, 0.0, 100, 0)
    assert v0["best_fixed"] == "team" and not v0["higher_return"] and v0["cheaper_as_good"]
    assert v0["met"] and v0["cost_diff"]["mean"] == pytest.approx(-90)
    # λ = 0.01: the team's return is 0, sequential's 0.1: the learned 0.9 is higher outright
    v1 = verdict(cheap_good, fixed, 0.01, 100, 0)
    assert v1["best_fixed"] == "sequential" and v1["higher_return"] and v1["met"]
    # a worse learned policy does not meet it
    assert not verdict(poor, {"team": cheap_good}, 0.0, 100, 0)["met"]


def test_results_table_has_a_block_per_cost_weight():
    probs = ["p0", "p1"]
    learned, team = rows([(p, 1.0, 10) for p in probs]), rows([(p, 0.5, 20) for p in probs])
    blocks = [
        {
            "cost_weight": lam,
            "learned": summarize(learned, lam, 10, 0),
            "fixed": {"team": summarize(team, lam, 10, 0)},
            "verdict": verdict(learned, {"team": team}, lam, 10, 0),
        }
        for lam in (0.0, 0.01)
    ]
    text = results_table({"by_cost_weight": blocks})
    assert "## λ = 0\n" in text and "## λ = 0.01" in text and text.count("| team |") == 2
    assert "target met" in text
