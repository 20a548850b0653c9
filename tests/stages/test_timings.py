"""Timings apart from results: the stages' outputs hold no seconds or tokens/s, the timing records do."""

import json

import pytest

from orchestry import paths
from orchestry.eval.records import write_method
from orchestry.stages.timings import timing_record, untimed


def _row(pid: str, correct: bool, total: float) -> dict:
    reward = {"total": total, "structure": 1.0, "syntax": 0.5, "pass_rate": float(correct)}
    reward["main_calls_aux"] = True
    return {
        "problem_id": pid,
        "correct": correct,
        "main_defined": True,
        "reward": reward,
        "new_tokens": 10,
    }


def test_a_method_s_files_hold_no_timing_and_its_timing_record_does(tmp_path, monkeypatch):
    """Two runs of the same code differ only in seconds: generations.jsonl and metrics.json (both
    tracked, by DVC and git) are the same for rows that differ in their seconds alone."""
    monkeypatch.chdir(tmp_path)
    rows = [
        _row("a", True, 2.5),
        _row("a", False, 2.5),
        _row("b", False, 2.0),
        _row("b", True, 2.0),
    ]
    written = []
    for seconds in (0.5, 2.0):  # the same answers generated at another speed
        write_method("single", [{**r, "seconds": seconds} for r in rows], [1], 20, 0)
        written.append(
            (paths.generations("single").read_bytes(), paths.metrics("single").read_bytes())
        )
        timing = json.loads(paths.timing("single").read_text())
        assert timing["response_seconds_mean"] == pytest.approx(seconds)
    assert written[0] == written[1]
    assert b"seconds" not in written[0][0] and b"tokens_per_s" not in written[0][1]
    assert not paths.timing("single").is_relative_to("results")


def test_a_training_history_keeps_its_timings_apart():
    history = [
        {"step": 0, "return_mean": 1.0, "tokens_per_s": 10.0, "step_seconds": 2.0},
        {"step": 1, "return_mean": 2.0, "tokens_per_s": 30.0, "step_seconds": 4.0},
    ]
    assert untimed(history) == [{"step": 0, "return_mean": 1.0}, {"step": 1, "return_mean": 2.0}]
    record = timing_record(history)
    assert record["step_seconds"] == [2.0, 4.0] and record["tokens_per_s_mean"] == 20.0
