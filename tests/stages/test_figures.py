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
