"""The figures stage's pure pieces: quarter returns per training run."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestry import figures
from orchestry.figures import quarter_returns


def test_quarter_returns_compare_first_and_last_quarter() -> None:
    history = pd.DataFrame({"return_mean": [0.2, 0.4, 0.1, 0.5, 0.9, 1.0, 0.8, 1.2]})
    assert quarter_returns(history) == pytest.approx((0.3, 1.0))


def test_quarter_returns_of_a_short_run_use_one_step_each() -> None:
    assert quarter_returns(pd.DataFrame({"return_mean": [0.5, 0.7, 0.6]})) == (0.5, 0.6)


def test_training_curves_leave_out_seed_runs_of_another_length(tmp_path, monkeypatch) -> None:
    """A seed run from another config (other max_steps) once crashed the figure (ragged arrays)."""
    monkeypatch.setattr(figures, "FIG_DIR", tmp_path)
    cols = ["return_mean", *(f"reward/{k}" for k, _ in figures.LEVELS)]

    def run(n: int, level: float) -> pd.DataFrame:
        return pd.DataFrame({c: [level + 0.1 * i for i in range(n)] for c in cols})

    figures.plot_training([run(2, 0.5), run(18, 0.2), run(2, 0.7)], smoothing=5)
    assert (tmp_path / "training_curves.png").stat().st_size > 10_000
