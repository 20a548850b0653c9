"""`python -m orchestry.eval.ablation`: levers against a reference run, paired over problems."""

import csv
import json

import pytest
import yaml

from orchestry.eval.ablation import main, settings_apart
from orchestry.eval.paired import per_problem_csv, per_problem_rows


def report(folder, pass_rates: dict[str, float], gate: str = "any", method: str = "magrpo"):
    """A report folder: params.yaml and per_problem.csv of a team whose test pass rate per problem
    is given (2 samples each)."""
    folder.mkdir()
    params = {"reward": {"coop_gate": gate, "tests": 1.0}, "seed": 0}
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    rows = [
        {
            "problem_id": pid,
            "correct": rate == 1.0,
            "reward": {"total": 1.5 + rate, "pass_rate": rate, "main_calls_aux": False},
        }
        for pid, rate in pass_rates.items()
        for _ in range(2)
    ]
    (folder / "per_problem.csv").write_text(per_problem_csv(per_problem_rows({method: rows})))
    return folder


def test_a_lever_better_on_every_problem_has_its_ci_above_zero(tmp_path):
    pids = [f"gen_unseen/f{i}/p" for i in range(8)] + ["coop/a", "coop/b"]
    ref = report(tmp_path / "ref", dict.fromkeys(pids, 0.25))
    better = report(tmp_path / "scaled", {p: 0.5 + 0.01 * i for i, p in enumerate(pids)}, "scaled")
    same = report(tmp_path / "same", dict.fromkeys(pids[:4], 0.25))
    out = tmp_path / "ablation"
    assert main([str(ref), str(better), str(same), "--out", str(out), "--resamples", "200"]) == 0
    with (out / "ablation.csv").open() as f:
        rows = list(csv.DictReader(f))
    (pooled,) = [
        r
        for r in rows
        if r["lever"] == "scaled" and r["heldout_set"] == "all" and r["metric"] == "test_pass_rate"
    ]
    assert pooled["settings"] == "reward.coop_gate=scaled" and int(pooled["n_problems"]) == 10
    assert float(pooled["ci_low"]) > 0 and float(pooled["reference_value"]) == pytest.approx(0.25)
    (coop,) = [
        r
        for r in rows
        if r["lever"] == "scaled" and r["heldout_set"] == "coop" and r["metric"] == "return"
    ]
    assert int(coop["n_problems"]) == 2
    # a lever run on fewer problems is paired over those it shares; no setting apart reads (none)
    assert {
        int(r["n_problems"]) for r in rows if r["lever"] == "same" and r["heldout_set"] == "all"
    } == {4}
    assert {r["settings"] for r in rows if r["lever"] == "same"} == {"(none)"}
    assert {float(r["diff"]) for r in rows if r["lever"] == "same"} == {0.0}
    assert "**" in (out / "ablation.md").read_text()
    assert len(json.loads((out / "manifest.json").read_text())["code_sha256"]) == 64


def test_a_report_without_per_problem_rows_is_named_and_nothing_is_written(tmp_path, capsys):
    ref = report(tmp_path / "ref", {"coop/a": 0.5})
    (tmp_path / "old").mkdir()
    out = tmp_path / "ablation"
    assert main([str(ref), str(tmp_path / "old"), "--out", str(out)]) == 2
    assert "old/per_problem.csv: no such file" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "ablation.partial").exists()
    assert main([str(ref), str(ref), "--out", str(out), "--method", "beam"]) == 2
    assert "no rows of method 'beam'" in capsys.readouterr().err


def test_settings_apart_names_the_dotted_keys_that_differ():
    a = {"train": {"lr": 1, "turns": 1}, "seed": 0}
    assert settings_apart(a, {"train": {"lr": 1, "turns": 2}, "seed": 0}) == ["train.turns=2"]
    assert settings_apart(a, a) == []


def test_report_colon_method_reads_another_method_of_a_report(tmp_path):
    pids = [f"coop/p{i}" for i in range(4)]
    team = report(tmp_path / "team", dict.fromkeys(pids, 0.5))
    older = report(tmp_path / "older", dict.fromkeys(pids, 0.25), method="single")
    out = tmp_path / "ablation"
    assert main([str(team), f"{older}:single", "--out", str(out), "--resamples", "50"]) == 0
    with (out / "ablation.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "test_pass_rate"]
    assert {r["lever"] for r in rows} == {"older:single"}
    assert float(rows[0]["diff"]) == pytest.approx(-0.25)
    assert "Against `team`" in (out / "ablation.md").read_text()


def test_the_reports_index_knows_an_ablation_folder_and_its_code(tmp_path):
    from orchestry.bookkeeping.recovered import ablation_code, kind_of, producing_code

    pids = ["coop/a", "coop/b"]
    ref = report(tmp_path / "ref", dict.fromkeys(pids, 0.5))
    out = tmp_path / "abl"
    assert main([str(ref), str(ref), "--out", str(out), "--resamples", "20"]) == 0
    assert kind_of(out) == "ablation" and kind_of(ref) == "experiment"
    record = json.loads((out / "manifest.json").read_text())
    assert record["command"].startswith("python -m orchestry.eval.ablation ")
    assert record["code_files"] == len(ablation_code())
    assert {"orchestry/eval/ablation.py", "orchestry/eval/paired.py"} <= set(ablation_code())
    assert producing_code(None, "ablation", "abl") == ablation_code()


def test_a_per_problem_csv_from_before_the_robust_rate_still_pairs(tmp_path):
    """A committed report's per_problem.csv lacks the robust_test_pass_rate column: the other
    metrics pair as before and that one is left out."""
    pids = ["coop/a", "coop/b", "coop/c"]
    ref = report(tmp_path / "ref", dict.fromkeys(pids, 0.25))
    with (ref / "per_problem.csv").open() as f:
        old = [
            {k: v for k, v in r.items() if k != "robust_test_pass_rate"} for r in csv.DictReader(f)
        ]
    with (ref / "per_problem.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(old[0]))
        writer.writeheader()
        writer.writerows(old)
    lever = report(tmp_path / "scaled", dict.fromkeys(pids, 0.5), "scaled")
    out = tmp_path / "ablation"
    assert main([str(ref), str(lever), "--out", str(out), "--resamples", "50"]) == 0
    with (out / "ablation.csv").open() as f:
        metrics = {r["metric"] for r in csv.DictReader(f)}
    assert "test_pass_rate" in metrics and "robust_test_pass_rate" not in metrics
