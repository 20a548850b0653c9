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
