"""Metrics and tables of a text environment's rows: the return and each reward part, with CIs."""

import pandas as pd
import pytest

from orchestry.eval.metrics import compute_metrics
from orchestry.eval.text_tables import text_comparison_csv, text_results_markdown


def _row(task: str, total: float, quality: float) -> dict:
    return {
        "problem_id": task,
        "reward": {"total": total, "quality": quality, "collaboration": 0.5},
        "text": "Once there was a fox.",
        "seconds": 0.5,
        "new_tokens": 10,
    }


ROWS = [_row("a", 1.0, 0.2), _row("a", 0.0, 0.4), _row("b", 0.5, 1.0), _row("b", 0.5, 0.0)]


def test_text_rows_get_the_return_and_every_part_with_cis():
    m = compute_metrics(ROWS, [1, 3], 200, seed=0)
    assert m["reward_parts"] == ["quality", "collaboration"]
    assert m["return_mean"] == pytest.approx(0.5)  # per-task means 0.5 and 0.5
    assert m["quality_mean"] == pytest.approx((0.3 + 0.5) / 2)
    assert m["collaboration_mean"] == pytest.approx(0.5)
    lo, hi = m["quality_ci95"]
    assert 0.3 <= lo <= m["quality_mean"] <= hi <= 0.5
    assert m["problems"] == 2 and m["n_per_problem"] == 2 and "tokens_per_s" not in m
    assert not any(k.startswith("pass@") for k in m)  # no tests, so no pass@k


def test_text_tables_show_each_method_with_its_intervals():
    m = compute_metrics(ROWS, [1], 200, seed=0)
    table = pd.DataFrame([{"method": "magrpo", "label": "MAGRPO (ours)", **m}])
    csv = text_comparison_csv(table, m["reward_parts"]).splitlines()
    assert csv[0].split(",")[:4] == ["method", "label", "new_tokens_mean", "return_mean"]
    assert "quality_ci_low" in csv[0] and csv[1].startswith("magrpo,MAGRPO (ours)")
    history = pd.DataFrame({"return_mean": [0.1, 0.2, 0.3, 0.9], "reward/quality": [0.5] * 4})
    md = text_results_markdown(table, m["reward_parts"], {"steps": 4}, history)
    assert "| MAGRPO (ours) | 0.500 [" in md
    assert "| return_mean | 0.100 | 0.900 | yes |" in md
    assert "| reward/quality | 0.500 | 0.500 | no |" in md
