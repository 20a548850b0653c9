"""workflow/scripts/sft_comparison.sh refuses what it cannot run before it writes anything."""

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

SCRIPT = Path("workflow/scripts/sft_comparison.sh")


@pytest.mark.parametrize(
    "env, args, message",
    [
        ({"CONTROL": "steps2"}, ["0"], "CONTROL=steps2: not a registered control"),
        ({}, [], "usage:"),
    ],
)
def test_a_bad_control_or_no_seed_exits_2_and_writes_nothing(tmp_path, env, args, message):
    (tmp_path / SCRIPT).parent.mkdir(parents=True)
    shutil.copy2(ROOT / SCRIPT, tmp_path / SCRIPT)
    proc = subprocess.run(
        ["bash", str(tmp_path / SCRIPT), *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["workflow"]  # no logs/, build/, reports/


def dry_run(tmp_path: Path, **env: str) -> list[str]:
    """The commands the script prints with DRY_RUN=1 for seed 0 (it runs and writes nothing)."""
    (tmp_path / SCRIPT).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / SCRIPT, tmp_path / SCRIPT)
    proc = subprocess.run(
        ["bash", str(tmp_path / SCRIPT), "0"],
        env={"PATH": "/usr/bin:/bin", "DRY_RUN": "1", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["workflow"]  # no logs/, build/, reports/
    return [line for line in proc.stdout.splitlines() if "orchestry.bookkeeping.experiment" in line]


def test_before_rl_0_leaves_the_ws_report_alone_and_writes_the_warm_start_s_under_build(tmp_path):
    """BEFORE_RL=0 is for a seed whose ws<seed> report is in: no command replaces it (the warm
    start's own run reported to reports/gpu_sft_<control>_ws<seed>/ with --replace, and so dropped
    its evaluation); with BEFORE_RL=1 the evaluation before RL writes it."""
    after = dry_run(tmp_path / "after", CONTROL="steps", BEFORE_RL="0")
    assert len(after) == 2
    assert not [c for c in after if "--out reports/gpu_sft_steps_ws0" in c]
    warm = [c for c in after if "--only prepare,sft " in c]
    assert len(warm) == 1 and "--out build/experiments/sft_steps_ws0_warm_start" in warm[0]
    assert [c for c in after if "--out reports/gpu_sft_steps_rl0 " in c]

    both = dry_run(tmp_path / "both", CONTROL="steps")
    ws = [c for c in both if "--out reports/gpu_sft_steps_ws0 " in c]
    assert len(both) == 3 and len(ws) == 1
    assert "--only prepare,sft,evaluate_single " in ws[0]
