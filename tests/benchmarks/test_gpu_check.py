"""The GPU check (benchmarks/gpu_check.py, `make gpu-check`) covers every GPU command the README and
docs/gpu.md document: a command added there without a check fails here, on any machine."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402


def test_every_documented_gpu_command_has_a_check() -> None:
    documented = gpu_check.documented_commands()
    commands = [c for found in documented.values() for c in found]
    assert any("torchrun" in c for c in commands) and any("gpu.yaml" in c for c in commands)
    assert [c for c in commands if not gpu_check.covered(c)] == []


def test_a_command_is_the_check_of_its_longest_prefix() -> None:
    two = "dvc exp run -S model.device=cuda -S train.processes=2 -S train.parallel=pipeline -S x=1"
    assert gpu_check.covered(two) == ["two_gpus_pipeline"]
    assert gpu_check.covered("dvc exp run -S model.device=cuda") == ["pipeline"]
    assert gpu_check.covered("python -m orchestry figures") == []


def test_the_header_jobs_of_gpu_yaml_are_read() -> None:
    jobs = gpu_check.header_jobs("workflow/experiments/gpu.yaml")
    assert jobs[0] == "--jobs" and int(jobs[1]) > 1


def test_only_runs_first_the_check_whose_work_folder_a_named_check_runs_in() -> None:
    # serve_cuda alone once crashed (FileNotFoundError: the pipeline check's folder) with no record
    names = [c.name for c in gpu_check.selected("serve_cuda,paper_random_3b")]
    assert names.index("pipeline") < names.index("serve_cuda") and "paper_random_3b" in names
    assert "gpu_yaml" not in names
    assert [c.name for c in gpu_check.selected("")] == [c.name for c in gpu_check.CHECKS]


def test_an_unknown_check_name_is_refused_before_anything_runs(capsys) -> None:
    # "levers" (the check is gpu_levers) was once skipped without a word
    assert gpu_check.main(["--only", "levers,pipeline"]) == 2
    err = capsys.readouterr().err
    assert "unknown check(s) levers" in err and "gpu_levers" in err
