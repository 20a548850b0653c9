"""End to end: the real pipeline on a tiny params file with the embedded model, via DVC and Snakemake.

Every test here reads the one shared tiny run (`tiny_pipeline` in conftest.py)."""

import json
from pathlib import Path

import pytest
import yaml
from conftest import PIPELINE, copy_repo, run_in

from orchestry.eval.metrics import compute_metrics
from orchestry.eval.paired import COLUMNS

pytestmark = [PIPELINE, pytest.mark.e2e]
BASELINES = ["single", "naive_concat", "sequential", "discussion"]
FROZEN = ["prompt_policy", "beam", "best_of"]  # methods for teams whose weights do not change


def strip_timing(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        r.pop("new_tokens")
    return rows


def test_dvc_repro_runs_every_stage_and_reports(tiny_pipeline):
    repo = tiny_pipeline.repo
    assert "Running stage 'train'" not in tiny_pipeline.default_log  # the opt-in run made it
    for name in [
        "reports/results.md",
        "results/smoke/smoke.json",
        "results/train/metrics.json",
        "results/schemes/summary.json",
        "results/evaluate/metrics.json",
    ]:
        assert (repo / name).is_file(), name
    for fig in [
        "training_curves",
        "baseline_comparison",
        "scheme_distribution",
        "scheme_evolution",
        "method_cost",
    ]:
        assert (repo / f"reports/figures/{fig}.png").stat().st_size > 10_000
    results = (repo / "reports/results.md").read_text()
    assert "Prompt policy" in results and "Beam search*" in results and "Best-of-M*" in results
    assert "## Paired differences" in results and "| Return % | Tests % | Coop % |" in results
    paired = (repo / "reports/paired.csv").read_text().splitlines()
    assert paired[0] == ",".join(COLUMNS)
    methods = {line.split(",")[4] for line in paired[1:]}
    assert methods == {*BASELINES, "single_grpo", *FROZEN}
    prompts = json.loads((repo / "results/prompt_policy/prompts.json").read_text())
    assert len(prompts["rounds"]) == 1 and prompts["candidates"][0]["rules"] == {}
    for b in BASELINES + FROZEN:  # every number in metrics.json is derivable from generations.jsonl
        rows = [
            json.loads(x)
            for x in (repo / f"results/baselines/{b}/generations.jsonl").read_text().splitlines()
        ]
        metrics = json.loads((repo / f"results/baselines/{b}/metrics.json").read_text())
        assert {
            "problem_id",
            "code",
            "program",
            "reward",
            "correct",
            "new_tokens",
        } <= set(rows[0])
        assert "seconds" not in rows[0]  # timings apart: logs/timings/<method>.json
        assert json.loads((repo / f"logs/timings/{b}.json").read_text())["tokens_per_s"] > 0
        assert metrics == compute_metrics(rows, [1, 3, 5, 10], 20, 0)
        assert set(metrics) >= {
            "pass@1",
            "pass@1_ci95",
            "return_mean",
            "return_ci95",
            "syntax_rate",
            "coop_rate",
            "new_tokens_mean",
        }
        assert "tokens_per_s" not in metrics


def test_stage_manifests_hold_code_and_params_and_the_run_record_the_rest(tiny_pipeline):
    """reports/figures/ and reports/orchestrate/ carry the stage's manifest (the same for the same
    code and params); the run's machine, date and wall time are in logs/, which git ignores."""
    repo = tiny_pipeline.repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for stage, folder in (("figures", "reports/figures"), ("orchestrate", "reports/orchestrate")):
        record = json.loads((repo / folder / "manifest.json").read_text())
        assert record["stage"] == stage and record["params"]["train"] == params["train"]
        assert "started" not in record and "commit" not in record
        run = json.loads((repo / "logs" / f"{stage}.run.json").read_text())
        assert run["wall_s"] > 0 and run["hardware"]["cpu_cores"] >= 1


def test_a_second_dvc_repro_runs_nothing(tiny_pipeline):
    second = run_in(tiny_pipeline.repo, "dvc", "repro")
    out = second.stdout + second.stderr
    assert "is cached" in out or "up to date" in out
    assert "Running stage" not in second.stdout


def test_snakemake_gives_what_dvc_gave(tiny_pipeline, tmp_path):
    """The same stages through Snakemake in a fresh copy: prepared data and baselines identical.
    Two instances of the one `baseline` rule (the lone model, and a team of two) stand for the four:
    the rule is the same, only its wildcard differs."""
    repo = tiny_pipeline.repo
    other = copy_repo(tmp_path / "other")
    (other / "params.yaml").write_text((repo / "params.yaml").read_text())
    compared = ["single", "naive_concat"]
    targets = [f"results/baselines/{b}/metrics.json" for b in compared]
    # one core: Snakemake sets OMP_NUM_THREADS to a rule's threads (2 for the model stages), and two
    # threads beside the other test process spin-wait on 2 cores
    run_in(other, "snakemake", "--cores", "1", *targets)
    for name in ["train.jsonl", "test.jsonl", "summary.json"]:
        assert (repo / "data/prepared" / name).read_bytes() == (
            other / "data/prepared" / name
        ).read_bytes()
    for b in compared:
        assert strip_timing(repo / f"results/baselines/{b}/generations.jsonl") == strip_timing(
            other / f"results/baselines/{b}/generations.jsonl"
        ), b


def test_the_browsable_report_holds_every_figure_and_results_md(tiny_pipeline):
    repo = tiny_pipeline.repo
    run_in(repo, "snakemake", "--report", "reports/report.html")
    html = (repo / "reports/report.html").read_text(errors="replace")
    for name in ["training_curves.png", "baseline_comparison.png", "results.md"]:
        assert name in html, name
