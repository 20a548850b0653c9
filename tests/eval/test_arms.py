"""`python -m orchestry.eval.arms`: the warm-started team against every arm found by the comparison's
report names, before and after RL, over the seeds in."""

import csv
import json

import pytest

from orchestry.bookkeeping.recovered import kind_of, producing_code, tool_code
from orchestry.eval.arms import REGISTERED_BASELINES, main
from orchestry.eval.paired import per_problem_csv, per_problem_rows
from orchestry.params import BASELINE_NAMES

PIDS = [f"gen_compose/f{i}" for i in range(6)]


def report(folder, seed: int, **rates: float):
    """A report folder: split.json of `seed` and per_problem.csv of each method at its pass rate on
    every problem (2 samples each)."""
    folder.mkdir(parents=True)
    (folder / "split.json").write_text(json.dumps({"seed": seed, "sets": {"gen_compose": 6}}))
    rows = {
        method: [
            {
                "problem_id": pid,
                "correct": rate == 1.0,
                "reward": {"total": 1.5 + rate, "pass_rate": rate, "main_calls_aux": False},
            }
            for pid in PIDS
            for _ in range(2)
        ]
        for method, rate in rates.items()
    }
    (folder / "per_problem.csv").write_text(per_problem_csv(per_problem_rows(rows)))


def means(out, **match):
    with (out / "arms.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["row"] == "mean" and r["heldout_set"] == "all"]
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def test_every_arm_is_found_by_its_name_and_paired_seed_by_seed(tmp_path):
    reports = tmp_path / "reports"
    for seed in (0, 1):  # the warm start and RL, team and single agent
        report(reports / f"x_ws{seed}", seed, magrpo=0.5, single_grpo=0.25)
        report(reports / f"x_rl{seed}", seed, magrpo=0.75, single_grpo=0.5)
    report(reports / "x_steps_ws0", 0, single_grpo=1.0)  # a control, seed 0 only
    report(reports / "x_shared_rl1", 1, magrpo=0.25)
    report(reports / "x", 0, single=0.0)  # the base model's baseline, on seed 0's split
    report(reports / "x_base1", 1, naive_concat=0.25)  # the baselines alone, on seed 1's split
    report(reports / "x_base0", 5, sequential=0.0)  # another split than seed 0's: not paired
    report(reports / "x_rl_vs_ws", 0, magrpo=0.0)  # another tool's folder: not a seed
    out = tmp_path / "arms"
    assert main([str(reports / "x"), "--out", str(out), "--resamples", "200"]) == 0

    metric = "test_pass_rate"
    (single,) = means(out, stage="before_rl", arm="single", metric=metric)
    assert int(single["n_pairs"]) == 2 and float(single["diff"]) == pytest.approx(0.25)
    (after,) = means(out, stage="after_rl", arm="single", metric=metric)
    assert float(after["run_value"]) == pytest.approx(0.75)
    (steps,) = means(out, stage="before_rl", arm="single_steps", metric=metric)
    assert int(steps["n_pairs"]) == 1 and float(steps["diff"]) == pytest.approx(-0.5)
    assert float(steps["ci_high"]) < 0
    (shared,) = means(out, stage="after_rl", arm="team_shared", metric=metric)
    assert shared["n_pairs"] == "1" and float(shared["diff"]) == pytest.approx(0.5)
    # the baseline read from the prefix's own report, for seed 0 alone (seed 1 drew another split)
    (base,) = means(out, stage="before_rl", arm="baseline:single", metric=metric)
    assert base["n_pairs"] == "1" and float(base["diff"]) == pytest.approx(0.5)
    assert not means(out, arm="single_contract")
    # the baselines' own run pairs with the team of its seed at both stages (the base model is
    # untrained); one drawn on another split does not
    for stage, team in (("before_rl", 0.5), ("after_rl", 0.75)):
        (concat,) = means(out, stage=stage, arm="baseline:naive_concat", metric=metric)
        assert concat["n_pairs"] == "1" and float(concat["diff"]) == pytest.approx(team - 0.25)
    assert not means(out, arm="baseline:sequential")

    md = (out / "arms.md").read_text()
    assert "before_rl single_steps: seeds 0;" in md and "after_rl single_512: seeds none" in md
    assert "after_rl baseline:naive_concat: seeds 1;" in md
    assert "before_rl baseline:sequential: seeds none" in md
    record = json.loads((out / "manifest.json").read_text())
    assert record["command"] == f"python -m orchestry.eval.arms {reports / 'x'} --out {out}"
    assert kind_of(out) == "arms" and producing_code(None, "arms", "x") == tool_code(
        "orchestry.eval.arms"
    )


def test_no_team_report_under_the_prefix_writes_nothing(tmp_path, capsys):
    report(tmp_path / "x_steps_ws0", 0, single_grpo=1.0)
    out = tmp_path / "arms"
    assert main([str(tmp_path / "x"), "--out", str(out)]) == 2
    assert "no report of the team to compare" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "arms.partial").exists()


def test_the_registered_baselines_are_the_pipelines():
    assert REGISTERED_BASELINES == tuple(f"baseline:{name}" for name in BASELINE_NAMES)
