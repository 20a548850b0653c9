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
