"""The warm start's pre-registered gate (issue #57): its thresholds and verdicts."""

import json

import pytest

from orchestry.eval.gate import HEADROOM, PASS_HIGH, PASS_LOW, warm_start_gate


def test_the_registered_thresholds():
    # docs/findings.md, "Pre-registration: the warm start", states these numbers
    assert (PASS_LOW, PASS_HIGH, HEADROOM) == (0.05, 0.90, 0.03)


@pytest.mark.parametrize(
    "single, main_ref, verdict",
    [
        (0.69, 0.82, "GO"),  # the probe's numbers
        (0.69, 0.72, "GO"),  # exactly the headroom
        (0.69, 0.71, "NO-GO"),  # a perfect helper could add too little
        (0.02, 0.50, "NO-GO"),  # a floor: only trivial asserts would be compared
        (0.95, 1.00, "NO-GO"),  # a ceiling: nothing left to gain
        (0.05, 0.08, "GO"),
        (0.90, 0.93, "GO"),
    ],
)
def test_the_verdict(single, main_ref, verdict):
    gate = warm_start_gate(single, main_ref)
    assert gate["verdict"] == verdict
    assert gate["single_pass_at_1"] == single and gate["main_with_reference_aux"] == main_ref


def test_a_number_that_is_no_rate_is_named():
    with pytest.raises(ValueError, match="main_with_reference_aux must be a rate"):
        warm_start_gate(0.5, 1.5)


def rows(method, pid, correct, main_ref):
    """Generation rows as the evaluation stages write them (the fields the report reads)."""
    return [
        {
            "method": method,
            "problem_id": pid,
            "correct": c,
            "main_correct_ref_aux": m,
            "n_passed": 1,
            "n_tests": 2,
            "reward": {"total": 1.0, "pass_rate": 0.5, "main_calls_aux": False},
            "coop_rate": 0.0,
        }
        for c, m in zip(correct, main_ref, strict=True)
    ]


def test_the_gate_reads_a_reports_compositional_set_and_writes_its_record(tmp_path):
    from orchestry.eval.gate import main
    from orchestry.eval.paired import per_problem_csv, per_problem_rows

    answered = {
        # the single agent: 1 of 4 and 3 of 4 correct -> pass@1 0.5 on gen_compose
        "single_grpo": rows("single_grpo", "gen_compose/a/x", [1, 0, 0, 0], [None] * 4)
        + rows("single_grpo", "gen_compose/b/y", [1, 1, 1, 0], [None] * 4)
        + rows("single_grpo", "coop/other", [1, 1, 1, 1], [None] * 4),
        # the team's main with the reference aux: 3 of 4 and 3 of 4 -> 0.75
        "magrpo": rows("magrpo", "gen_compose/a/x", [0] * 4, [1, 1, 1, 0])
        + rows("magrpo", "gen_compose/b/y", [0] * 4, [0, 1, 1, 1])
        + rows("magrpo", "coop/other", [0] * 4, [0, 0, 0, 0]),
    }
    report = tmp_path / "gpu_sft"
    report.mkdir()
    (report / "per_problem.csv").write_text(per_problem_csv(per_problem_rows(answered)))
    assert main([str(report)]) == 0
    gate = json.loads((report / "gate.json").read_text())
    assert gate["single_pass_at_1"] == 0.5 and gate["main_with_reference_aux"] == 0.75
    assert gate["verdict"] == "GO" and gate["problems"] == 2
    assert gate["manifest"]["code_sha256"] and gate["manifest"]["code_files"] > 1


def test_a_report_without_the_team_stops_the_gate_with_exit_2(tmp_path, capsys):
    from orchestry.eval.gate import main
    from orchestry.eval.paired import per_problem_csv, per_problem_rows

    answered = {"single_grpo": rows("single_grpo", "gen_compose/a/x", [1, 0], [None] * 2)}
    (tmp_path / "per_problem.csv").write_text(per_problem_csv(per_problem_rows(answered)))
    assert main([str(tmp_path)]) == 2
    assert "magrpo" in capsys.readouterr().err and not (tmp_path / "gate.json").exists()
