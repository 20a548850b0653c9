"""benchmarks/paper_scale.py: the gradient check, the multi-GPU speed-up, and a tiny CPU run end to
end."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import converted_model

from orchestry.agents.lora.base_model import EMBEDDED_MODEL
from orchestry.bookkeeping import code_deps

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

from paper_scale import comlrl_summary, gradient_check, multi_gpu_summary  # noqa: E402


def test_gradient_check_needs_a_finite_norm_for_every_adapter_at_every_step() -> None:
    ok = {"step_s": [1.0, 1.0], "grad_norms": [{"a": 0.3, "b": 0.2}, {"a": 0.1, "b": 0.4}]}
    assert gradient_check(ok) == {
        "steps": 2,
        "steps_updated": 2,
        "finite_every_step": True,
        "max_grad_norm": 0.4,
    }
    bad = {"step_s": [1.0, 1.0], "grad_norms": [{"a": 0.3}, {"a": math.nan}]}
    assert not gradient_check(bad)["finite_every_step"]
    skipped = {"step_s": [1.0, 1.0], "grad_norms": [{"a": 0.3}, {}]}  # no update is no evidence
    assert gradient_check(skipped) == {
        "steps": 2,
        "steps_updated": 1,
        "finite_every_step": False,
        "max_grad_norm": 0.3,
    }


def test_comlrl_keys_use_its_steady_steps_and_say_when_it_did_not_fit() -> None:
    theirs = {"step_s": [90.0, 60.0, 62.0], "peak_gpu_mb": 5e4, "oom": False, "error": None}
    out = comlrl_summary({"step_seconds": 3.05}, theirs)
    assert out["comlrl_step_seconds"] == 61.0 and out["comlrl_steps"] == 3
    assert math.isclose(out["ratio_vs_comlrl"], 0.05) and not out["comlrl_oom"]
    oom = comlrl_summary({"step_seconds": 3.0}, {"oom": True, "peak_gpu_mb": 1.3e5, "error": "x"})
    assert oom["comlrl_oom"] and oom["ratio_vs_comlrl"] is None and oom["comlrl_steps"] == 0
    assert oom["comlrl_peak_gpu_mb"] == 1.3e5


def test_multi_gpu_speedup_is_one_process_step_over_two_and_null_when_a_run_failed() -> None:
    settings = {"parallel": "pipeline", "rollouts_ahead": 1, "set": []}
    runs = {"1": {"step_seconds": 1.64, "devices": ["H200"]}, "2": {"step_seconds": 0.82}}
    out = multi_gpu_summary("3b", runs, settings, None)
    assert math.isclose(out["speedup"], 2.0) and out["error"] is None and out["world"] == 2
    assert out["one_card_step_seconds"] == 1.64 and out["two_cards_step_seconds"] == 0.82
    assert out["settings"] == settings and out["devices"]["1"] == ["H200"]
    half = multi_gpu_summary("3b", {"1": runs["1"]}, settings, "the 2-process run ended with 1")
    assert half["speedup"] is None and half["two_cards_step_seconds"] is None
    none = multi_gpu_summary("3b", {}, settings, "2 GPUs needed, 1 visible")
    assert none["speedup"] is None and none["error"] == "2 GPUs needed, 1 visible"


def test_the_manifest_code_holds_the_scripts_paper_scale_runs() -> None:
    code = code_deps.script_code(REPO / "benchmarks" / "paper_scale.py")
    assert {"benchmarks/multi_gpu.py", "benchmarks/timed_train.py"} <= set(code)


@pytest.mark.slow
def test_tiny_cpu_run_writes_every_key(tmp_path: Path) -> None:
    out = tmp_path / "paper_scale.json"
    # the tokenizer comes from the embedded model, converted once per checkout (conftest.converted_model);
    # the random model is built here
    (tmp_path / EMBEDDED_MODEL).symlink_to(converted_model())
    command = [sys.executable, str(REPO / "benchmarks" / "paper_scale.py"), "--shapes", "135m"]
    command += ["--steps", "3", "--device", "cpu", "--problems-per-step", "1"]
    command += ["--group-size", "2", "--max-new-tokens", "4", "--cache-dir", str(tmp_path)]
    command += ["--profile", "--multi-gpu", "135m"]  # the pipeline on 2 CPU processes
    subprocess.run([*command, "--out", str(out)], check=True, cwd=REPO)
    report = json.loads(out.read_text())
    assert report["device"]["name"] == "cpu"
    shape = report["135m"]
    assert shape["steps"] == 3 and shape["finite_every_step"] and not shape["oom"]
    for key in ("step_seconds", "update_seconds", "generation_tokens_per_s"):
        assert shape[key] > 0
    assert report["settings"]["reward_noise"] > 0  # flagged: a random model trains on noise
    profile = report["profiles"]["135m"]  # the last step's generation and update, profiled
    assert "aten::" in profile["generation_by_cpu"] and "aten::" in profile["update_by_cpu"]
    assert profile["generation_wall_s"] > 0 and profile["update_wall_s"] > 0
    multi = report["multi_gpu"]
    assert multi["error"] is None and report["multi_gpu_speedup_135m"] == multi["speedup"] > 0
    assert multi["settings"] == {
        "parallel": "pipeline",
        "rollouts_ahead": 1,
        "set": ["train.parallel=pipeline", "train.rollouts_ahead=1"],
    }
    assert multi["runs"]["2"]["world_size"] == 2 and multi["runs"]["1"]["world_size"] == 1
    manifest = json.loads((tmp_path / "paper_scale.manifest.json").read_text())
    assert {"commit", "dirty", "code_sha256", "params", "hardware", "wall_s"} <= set(manifest)
