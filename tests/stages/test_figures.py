"""The figures stage: training curves across seed runs."""

from __future__ import annotations

import pandas as pd

from orchestry.stages import figures


def test_training_curves_leave_out_seed_runs_of_another_length(tmp_path, monkeypatch) -> None:
    """A seed run from another config (other max_steps) once crashed the figure (ragged arrays)."""
    monkeypatch.setattr(figures, "FIG_DIR", tmp_path)
    cols = ["return_mean", *(f"reward/{k}" for k, _ in figures.LEVELS)]

    def run(n: int, level: float) -> pd.DataFrame:
        return pd.DataFrame({c: [level + 0.1 * i for i in range(n)] for c in cols})

    figures.plot_training([run(2, 0.5), run(18, 0.2), run(2, 0.7)], smoothing=5)
    assert (tmp_path / "training_curves.png").stat().st_size > 10_000


def test_comparison_csv_has_each_rate_with_its_ci() -> None:
    from orchestry.eval.metrics import compute_metrics
    from orchestry.eval.tables import comparison_csv

    row = {
        "problem_id": "a",
        "correct": True,
        "main_defined": True,
        "aux_defined": 1.0,
        "aux_correct": None,
        "main_correct_ref_aux": True,
        "reward": {
            "total": 4.0,
            "structure": 1,
            "syntax": 0.5,
            "pass_rate": 1.0,
            "main_calls_aux": True,
        },
        "seconds": 1.0,
        "new_tokens": 5,
    }
    m = compute_metrics([row, {**row, "problem_id": "b"}], ks=[1], resamples=20, seed=0)
    table = pd.DataFrame([{"method": "magrpo", "label": "MAGRPO", **m}])
    head = comparison_csv(table).splitlines()[0].split(",")
    for col in ("coop_rate", "test_pass_rate"):
        assert {col, f"{col}_ci_low", f"{col}_ci_high"} <= set(head)
    assert comparison_csv(table).splitlines()[1].split(",")[head.index("aux_correct_rate")] == ""
