"""pass@k against hand-computed values, and metrics re-derived from rows."""

import math

import pytest

from orchestry.eval.metrics import bootstrap_ci, compute_metrics, pass_at_k, quarter_means, speed


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 0, 1, 0.0),
        (5, 5, 5, 1.0),
        (5, 1, 1, 0.2),
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
        (10, 3, 5, 1 - math.comb(7, 5) / math.comb(10, 5)),
        (3, 0, 3, 0.0),  # n == k, c == 0
        (3, 1, 3, 1.0),  # n == k, c > 0
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_bootstrap_ci_brackets_mean_and_is_seeded():
    vals = [0.0, 1.0, 0.5, 0.25]
    lo, hi = bootstrap_ci(vals, 500, seed=1)
    assert lo <= sum(vals) / 4 <= hi
    assert (lo, hi) == bootstrap_ci(vals, 500, seed=1)
    assert bootstrap_ci([0.3] * 5, 100, 0) == pytest.approx((0.3, 0.3))


def _row(pid, correct, total):
    return {
        "problem_id": pid,
        "correct": correct,
        "main_defined": True,
        "reward": {
            "total": total,
            "structure": 1.0,
            "syntax": 0.5,
            "pass_rate": 1.0 if correct else 0.0,
            "main_calls_aux": True,
        },
        "seconds": 0.5,
        "new_tokens": 10,
    }


def test_compute_metrics_from_rows():
    rows = [
        _row("a", True, 4.0),
        _row("a", False, 1.0),
        _row("b", False, 2.0),
        _row("b", False, 2.0),
    ]
    m = compute_metrics(rows, ks=[1, 2, 3], resamples=100, seed=0)
    assert m["pass@1"] == pytest.approx((0.5 + 0.0) / 2)
    assert m["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert "pass@3" not in m  # n = 2 < 3
    assert m["return_mean"] == pytest.approx((2.5 + 2.0) / 2)
    assert m["coop_rate"] == pytest.approx(0.25)
    # speed is a timing, not a result: apart from the metrics (stages/timings.py)
    assert "tokens_per_s" not in m and "response_seconds_mean" not in m
    assert speed(rows)["tokens_per_s"] == pytest.approx(20.0)


def test_quarter_means_compare_first_and_last_quarter() -> None:
    assert quarter_means([0.2, 0.4, 0.1, 0.5, 0.9, 1.0, 0.8, 1.2]) == pytest.approx((0.3, 1.0))


def test_quarter_means_of_a_short_run_use_one_step_each() -> None:
    assert quarter_means([0.5, 0.7, 0.6]) == (0.5, 0.6)


def test_role_rates_with_cis_and_not_applicable_rows():
    rows = [
        {
            **_row("a", True, 4.0),
            "aux_defined": 1.0,
            "aux_correct": 1.0,
            "main_correct_ref_aux": True,
        },
        {
            **_row("a", False, 1.0),
            "aux_defined": 0.0,
            "aux_correct": 0.0,
            "main_correct_ref_aux": False,
        },
        {
            **_row("b", False, 2.0),
            "aux_defined": 1.0,
            "aux_correct": None,
            "main_correct_ref_aux": None,
        },
        {
            **_row("b", False, 2.0),
            "aux_defined": 1.0,
            "aux_correct": None,
            "main_correct_ref_aux": None,
        },
    ]
    m = compute_metrics(rows, ks=[1], resamples=200, seed=0)
    assert m["aux_defined_rate"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["aux_correct_rate"] == pytest.approx(0.5)  # problem b is n/a: left out
    assert m["main_correct_ref_aux_rate"] == pytest.approx(0.5)
    for name in ("coop_rate", "test_pass_rate", "aux_defined_rate", "main_calls_aux_rate"):
        lo, hi = m[f"{name}_ci95"]
        assert lo <= m[name] <= hi
    na = compute_metrics([_row("c", True, 4.0)], ks=[1], resamples=20, seed=0)
    assert na["aux_correct_rate"] is None and na["aux_correct_rate_ci95"] is None


def test_the_robust_test_pass_rate_leaves_out_rows_without_one():
    rows = [
        {**_row("a", False, 1.0), "robust_pass_rate": 0.0},
        {**_row("a", True, 4.0), "robust_pass_rate": 0.5},
        {**_row("b", True, 4.0), "robust_pass_rate": None},  # every assert trivial
        {**_row("b", True, 4.0), "robust_pass_rate": None},
        _row("c", True, 4.0),  # a row from before the rate existed
    ]
    m = compute_metrics(rows, ks=[1], resamples=200, seed=0)
    assert m["test_pass_rate"] == pytest.approx(4 / 5)
    assert m["robust_test_pass_rate"] == pytest.approx(0.25)
    assert m["robust_test_pass_rate_ci95"] == pytest.approx([0.25, 0.25])  # one problem has it
    assert m["all_trivial_problems"] == 1
    old = compute_metrics([_row("c", True, 4.0)], ks=[1], resamples=20, seed=0)
    assert old["robust_test_pass_rate"] is None and old["robust_test_pass_rate_ci95"] is None
    assert "all_trivial_problems" not in old
