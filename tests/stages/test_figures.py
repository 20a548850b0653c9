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
    paper = {"return_pct": 100.0, "tests_pct": 100.0, "coop_pct": 0.0}
    table = pd.DataFrame([{"method": "magrpo", "label": "MAGRPO", **m, **paper}])
    head = comparison_csv(table).splitlines()[0].split(",")
    for col in ("coop_rate", "test_pass_rate"):
        assert {col, f"{col}_ci_low", f"{col}_ci_high"} <= set(head)
    assert head[-3:] == ["return_pct", "tests_pct", "coop_pct"]
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
    methods = ["single", "naive_concat", "sequential", "discussion", "single_grpo", "magrpo"]
    for method in [*methods, "beam"]:
        files[method].write_text(json.dumps({"return_mean": 1.0}))
    table = figures.load_table()
    assert list(table["method"]) == [*methods, "beam"]
    files["single"].unlink()
    with pytest.raises(FileNotFoundError, match="single.json is missing"):
        figures.load_table()


def _code_rows(method: str, pid: str, total: float, n: int = 2) -> list[dict]:
    reward = {"total": total, "structure": 1.0, "syntax": 0.5, "pass_rate": total / 4}
    reward |= {"main_calls_aux": True, "cooperation": total - 2.5}
    row = {"method": method, "problem_id": pid, "correct": total == 4.0, "main_defined": True}
    row |= {"aux_defined": 1.0, "aux_correct": None, "main_correct_ref_aux": None}
    return [{**row, "reward": reward, "seconds": 1.0, "new_tokens": 5} for _ in range(n)]


def test_the_stage_writes_paired_csv_and_the_paper_columns(tmp_path, monkeypatch) -> None:
    """The code branch of `figures.run` on saved rows (the figures themselves left out)."""
    from orchestry import io, paths
    from orchestry.bookkeeping import fingerprint
    from orchestry.eval.metrics import compute_metrics
    from orchestry.eval.paired import COLUMNS
    from orchestry.params import parse_params

    monkeypatch.chdir(tmp_path)  # every pipeline path is relative to the project root
    for name in dir(figures):
        if name.startswith("plot_"):
            monkeypatch.setattr(figures, name, lambda *a, **k: None)
    scores = {"magrpo": 4.0, "single": 3.0, "naive_concat": 3.0, "sequential": 4.0}
    scores |= {"discussion": 3.5, "single_grpo": 3.0}
    for method, score in scores.items():
        rows = _code_rows(method, "coop/a", score) + _code_rows(method, "humaneval/H/0", score)
        if method in ("magrpo", "single"):  # the others' rows are from before the robust rate
            robust = {"coop/a": score / 8, "humaneval/H/0": None}  # H/0: every assert trivial
            rows = [{**r, "robust_pass_rate": robust[r["problem_id"]]} for r in rows]
        io.write_jsonl(paths.generations(method), rows)
        io.write_json(paths.metrics(method), compute_metrics(rows, [1], 50, 0))
    io.write_json(figures.SCHEMES, {"labels": ["x"], "per_method": {}, "training_windows": []})
    io.write_json(paths.TRAIN_METRICS, {"steps": 2})
    io.write_text(paths.HISTORY, "return_mean,coop_rate\n1.0,0.0\n2.0,0.5\n")
    params = parse_params({})
    fingerprint.write_all(params, ["figures"])  # what `python -m orchestry figures` does first
    figures.run(params)

    lines = paths.PAIRED_CSV.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS)
    paired = pd.read_csv(paths.PAIRED_CSV)
    # {all, coop, humaneval} x 4 metrics x 5 other methods, and the robust rate where both have it
    assert len(paired) == 3 * 4 * 5 + 2
    robust = paired.query("metric == 'robust_test_pass_rate'")
    assert robust[["heldout_set", "method", "n_problems", "diff"]].values.tolist() == [
        ["all", "single", 1, 0.125],
        ["coop", "single", 1, 0.125],
    ]
    assert set(paired["method"]) == set(scores) - {"magrpo"}
    single = paired.query("heldout_set == 'all' and metric == 'return' and method == 'single'")
    assert single[["n_problems", "n_samples", "diff"]].values.tolist() == [[2, 2, 1.0]]
    same = paired.query("method == 'sequential'")
    assert (same["diff"] == 0).all() and (same["ci_low"] == 0).all()

    comparison = pd.read_csv(paths.COMPARISON_CSV).set_index("method")
    assert comparison.loc["magrpo", ["return_pct", "tests_pct", "coop_pct"]].tolist() == [
        100.0,
        100.0,
        100.0,
    ]
    assert comparison.loc["single", "return_pct"] == 75.0
    assert comparison.loc["magrpo", "robust_test_pass_rate"] == 0.5
    assert comparison["robust_test_pass_rate"].isna().sum() == len(scores) - 2
    md = paths.RESULTS_MD.read_text()
    assert "| Test pass rate | Robust test pass rate | Coop. rate |" in md
    assert "| 1.000 | 0.500 | 1.000 |" in md and "| 0.750 | n/a | 1.000 |" in md
    assert "| Return % | Tests % | Coop % |" in md and "(arXiv 2508.04652, Table 2)" in md
    assert "## Paired differences (team − method, 95% paired bootstrap CI" in md
    assert "| all | 2 | 2 | return | Single model | 4.000 | 3.000 | **+1.000** |" in md
