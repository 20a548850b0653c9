"""`python -m orchestry.eval.seeds`: a method against another over seeds, each seed's pair paired."""

import csv
import json

import pytest
from test_ablation import report

from orchestry.bookkeeping.recovered import kind_of, producing_code, tool_code
from orchestry.eval.seeds import main, two_level_ci


def rows_of(out, **match):
    with (out / "seeds.csv").open() as f:
        return [r for r in csv.DictReader(f) if all(r[k] == v for k, v in match.items())]


def test_each_seed_is_paired_over_its_own_problems_and_the_mean_carries_both(tmp_path):
    # two seeds, two splits: seed 1's problems are not seed 2's
    one = [f"gen_unseen/a{i}" for i in range(6)]
    two = [f"gen_unseen/b{i}" for i in range(6)]
    team1 = report(tmp_path / "team1", dict.fromkeys(one, 0.5))
    single1 = report(tmp_path / "single1", dict.fromkeys(one, 0.25), method="single_grpo")
    team2 = report(tmp_path / "team2", dict.fromkeys(two, 0.25))
    single2 = report(tmp_path / "single2", dict.fromkeys(two, 0.5), method="single_grpo")
    out = tmp_path / "seeds"
    pairs = [f"{team1},{single1}:single_grpo", f"{team2},{single2}:single_grpo"]
    assert main([*pairs, "--out", str(out), "--resamples", "300"]) == 0
    per_pair = rows_of(out, row="pair", heldout_set="all", metric="test_pass_rate")
    assert [(r["run"], float(r["diff"])) for r in per_pair] == [("team1", 0.25), ("team2", -0.25)]
    assert all(int(r["n_problems"]) == 6 for r in per_pair)  # each over its own seed's problems
    assert float(per_pair[0]["ci_low"]) > 0 > float(per_pair[1]["ci_high"])
    (mean,) = rows_of(out, row="mean", heldout_set="all", metric="test_pass_rate")
    # +0.25 and -0.25: the mean is 0, and its CI spans the spread between the seeds
    assert float(mean["diff"]) == pytest.approx(0.0) and int(mean["n_pairs"]) == 2
    assert float(mean["ci_low"]) == pytest.approx(-0.25) and float(
        mean["ci_high"]
    ) == pytest.approx(0.25)
    md = (out / "seeds.md").read_text()
    assert md.startswith("# 2 seeds") and "no longer cooperating" in md and "0 of 2" not in md
    record = json.loads((out / "manifest.json").read_text())
    assert record["command"] == f"python -m orchestry.eval.seeds {pairs[0]} {pairs[1]} --out {out}"
    assert kind_of(out) == "seeds" and producing_code(None, "seeds", "x") == tool_code(
        "orchestry.eval.seeds"
    )


def test_a_pair_without_a_shared_problem_or_a_half_pair_writes_nothing(tmp_path, capsys):
    team = report(tmp_path / "team", {"coop/a": 0.5})
    other = report(tmp_path / "other", {"coop/b": 0.5}, method="single_grpo")
    out = tmp_path / "seeds"
    assert main([f"{team},{other}:single_grpo", "--out", str(out)]) == 2
    assert "team,other:single_grpo: no held-out problem in common" in capsys.readouterr().err
    assert main([str(team), "--out", str(out)]) == 2
    assert "a pair is RUN,AGAINST" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "seeds.partial").exists()


def test_the_two_level_ci_is_a_point_when_every_difference_is_the_same():
    import numpy as np

    same = [np.full(5, 0.1), np.full(3, 0.1)]
    assert two_level_ci(same, 100, 0) == pytest.approx((0.1, 0.1))
