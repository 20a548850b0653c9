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


def test_the_team_s_main_with_the_reference_helper_pairs_as_its_own_method(tmp_path, capsys):
    """`REPORT:magrpo+reference_aux` is the team's main joined with the reference helper: its pass@1
    per problem (per_problem.csv's main_with_reference_aux), paired with the team itself (what its
    own helper costs) or with another method (whether a perfect helper closes the gap)."""
    from orchestry.eval.paired import per_problem_csv, per_problem_rows

    def sample(pid: str, correct: bool, main_ref: bool) -> dict:
        return {
            "problem_id": pid,
            "correct": correct,
            "main_correct_ref_aux": main_ref,
            "reward": {"total": 1.0, "pass_rate": float(correct), "main_calls_aux": True},
        }

    pids = [f"gen_compose/p{i}" for i in range(6)] + ["coop/a", "coop/b"]
    # the team passes half its problems; its main with the reference helper passes every one
    team = tmp_path / "team"
    team.mkdir()
    rows = [sample(p, i % 2 == 0, True) for i, p in enumerate(pids) for _ in range(2)]
    (team / "per_problem.csv").write_text(per_problem_csv(per_problem_rows({"magrpo": rows})))
    single = report(tmp_path / "single", dict.fromkeys(pids, 1.0), method="single_grpo")
    out = tmp_path / "seeds"
    ref = f"{team}:magrpo+reference_aux"
    argv = [f"{team},{ref}", f"{ref},{single}:single_grpo", "--out", str(out)]
    assert main([*argv, "--resamples", "200"]) == 0
    helper = rows_of(out, row="pair", run="team", against="team:magrpo+reference_aux")
    assert {(r["heldout_set"], r["metric"]) for r in helper} == {
        (s, "pass@1") for s in ("all", "coop", "gen_compose")
    }
    pooled = [r for r in helper if r["heldout_set"] == "all"]
    assert [float(r["diff"]) for r in pooled] == [-0.5]  # the team's own helper costs half
    (closed,) = rows_of(out, row="pair", heldout_set="gen_compose", run="team:magrpo+reference_aux")
    assert closed["against"] == "single:single_grpo" and float(closed["diff"]) == 0.0
    md = (out / "seeds.md").read_text()
    assert md.startswith("# 2 seeds") and "`team:magrpo+reference_aux` − `single:single_grpo`" in md
    # a report without the measure (a single agent's) is named, and nothing is written
    bad = main([f"{team},{single}:single_grpo+reference_aux", "--out", str(tmp_path / "no")])
    assert (
        bad == 2 and "no main_with_reference_aux of method 'single_grpo'" in capsys.readouterr().err
    )
    assert not (tmp_path / "no").exists()
