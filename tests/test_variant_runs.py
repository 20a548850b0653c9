"""The runs beside the default one (optional/runs/dvc.yaml, orchestry/bookkeeping/variant_runs.py):
seeds and levers as DVC stages, end to end on the shared tiny pipeline, and their refusals."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import PIPELINE, ROOT, copy_run, run_in

from orchestry.bookkeeping import variant_runs
from orchestry.params import ParamsError, parse_params

RUNS = "optional/runs/dvc.yaml"


def test_overrides_read_dotted_keys_and_yaml_values() -> None:
    over = variant_runs.overrides(["train.credit_weight=0.5", "env.rename_lone_helper=true"])
    assert over == {"train": {"credit_weight": 0.5}, "env": {"rename_lone_helper": True}}
    with pytest.raises(ParamsError, match="KEY=VALUE"):
        variant_runs.overrides(["train.credit_weight"])


def test_a_key_params_yaml_lacks_is_refused_naming_it() -> None:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    with pytest.raises(ParamsError, match="train.credit_weigth: no such key"):
        variant_runs.over_params(raw, variant_runs.overrides(["train.credit_weigth=0.5"]))


def test_a_lever_that_selects_other_code_is_refused_before_anything_runs(monkeypatch) -> None:
    """The runs' DVC code dependency is the default fingerprint: a key that selects another plug-in
    (here another environment) would run code it does not hold."""
    monkeypatch.chdir(ROOT)  # the committed fingerprints
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    variant_runs.same_code(("train", "evaluate"), parse_params(raw), ["seed=1"])
    story = variant_runs.over_params(raw, variant_runs.overrides(["env.name=story"]))
    with pytest.raises(variant_runs.VariantFailed, match="stage train would run other code"):
        variant_runs.same_code(("train",), parse_params(story), ["env.name=story"])


def test_the_command_exits_2_on_a_bad_key_and_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    assert variant_runs.main(["lever", "typo", "train.no_such_key=1"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_no_default_stage_reads_what_the_runs_write() -> None:
    """Else `dvc repro` would run the seeds and levers as the default pipeline's upstream."""
    outs = {"reports/seed_runs", "reports/ablations", "reports/ablations.md"}
    for stage in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"].values():
        assert not {str(d) for d in stage.get("deps", [])} & outs


@PIPELINE
@pytest.mark.e2e
def test_seeds_and_levers_are_dvc_stages_that_rerun_only_on_change(tiny_pipeline, tmp_path):
    """One seed and one lever (the file cut to them), their report; a second repro runs nothing,
    and the default pipeline stays up to date."""
    repo = copy_run(tiny_pipeline, tmp_path / "repo")
    spec = yaml.safe_load((repo / RUNS).read_text())
    stages = spec["stages"]
    stages["seed_run"]["foreach"] = [1]
    stages["lever"]["foreach"] = {"credit": "train.credit_weight=0.5"}
    stages["report"]["deps"] = [
        d
        for d in stages["report"]["deps"]
        if not d.startswith(("reports/seed_runs/seed2", "reports/ablations/"))
    ] + ["reports/ablations/credit"]
    (repo / RUNS).write_text(yaml.safe_dump(spec, sort_keys=False))
    for stale in [
        "reports/seed_runs",
        "reports/ablations",
    ]:  # the committed runs are the real params'
        run_in(repo, "git", "rm", "-rq", stale)
    out = run_in(repo, "dvc", "repro", RUNS).stdout
    for stage in ("seed_run@1", "lever@credit", "report"):
        assert f"Running stage '{RUNS}:{stage}'" in out
    steps = yaml.safe_load((repo / "params.yaml").read_text())["train"]["max_steps"]
    seed = (repo / "reports/seed_runs/seed1.csv").read_text().splitlines()
    assert len(seed) == 1 + steps
    assert yaml.safe_load((repo / "cache/variants/seed1/params.yaml").read_text())["seed"] == 1
    lever = repo / "reports/ablations/credit"
    assert (lever / "params.txt").read_text() == "train.credit_weight=0.5\n"
    assert json.loads((lever / "train.json").read_text())["steps"] == steps
    assert "pass@1" in json.loads((lever / "evaluate.json").read_text())
    table = (repo / "reports/ablations.md").read_text()
    assert (
        "| default (this commit) |" in table and "| credit | `train.credit_weight=0.5` |" in table
    )
    runs = (repo / "reports/seed_runs/runs.md").read_text()
    assert "| this run |" in runs and "| seed1 |" in runs
    assert (repo / "reports/seed_runs/training_curves.png").stat().st_size > 10_000
    for folder in ("seed_runs", "ablations"):
        manifest = json.loads((repo / "reports" / folder / "manifest.json").read_text())
        assert manifest["command"] == f"dvc repro {RUNS}" and manifest["code_sha256"]
    again = run_in(repo, "dvc", "repro", RUNS).stdout
    assert "Running stage" not in again
    status = run_in(repo, "dvc", "status", "dvc.yaml", "optional/dvc.yaml").stdout
    assert "up to date" in status
