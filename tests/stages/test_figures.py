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


def test_ablations_table_has_one_row_per_lever_with_cis() -> None:
    from orchestry.eval.tables import ablations_markdown

    ev = {"coop_rate": 0.25, "coop_rate_ci95": [0.1, 0.4], "test_pass_rate": 0.5, "pass@1": 0.0}
    ev |= {"test_pass_rate_ci95": [0.3, 0.7], "pass@1_ci95": [0.0, 0.0], "aux_correct_rate": None}
    train = {"steps": 18, "coop_rate_first_quarter": 0.0, "coop_rate_last_quarter": 0.125}
    md = ablations_markdown(
        ev, train, {"credit": {"params": "train.credit_weight=0.5", "train": train, "evaluate": ev}}
    )
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(rows) == 3 and rows[2].startswith("| credit | `train.credit_weight=0.5` | 18 |")
    assert "0.000 -> 0.125" in rows[2] and "0.250 [0.10, 0.40]" in rows[2] and "n/a" in rows[2]


def test_the_frozen_team_methods_are_left_out_only_when_absent(tmp_path, monkeypatch) -> None:
    """An experiment run with --only may skip prompt_policy and beam; a missing baseline is an error."""
    import json

    import pytest

    files = {m: tmp_path / f"{m}.json" for m in figures.METHOD_LABELS}
    monkeypatch.setattr(figures, "metric_paths", lambda: files)
    for method in ["single", "naive_concat", "sequential", "discussion", "magrpo", "beam"]:
        files[method].write_text(json.dumps({"return_mean": 1.0}))
    table = figures.load_table()
    assert list(table["method"]) == [
        "single",
        "naive_concat",
        "sequential",
        "discussion",
        "magrpo",
        "beam",
    ]
    files["single"].unlink()
    with pytest.raises(FileNotFoundError, match="single.json is missing"):
        figures.load_table()
