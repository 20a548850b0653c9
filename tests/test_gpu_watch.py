"""The runner's and the GPU check's view of a process tree (orchestry/bookkeeping/gpu_watch.py)."""

from __future__ import annotations

import subprocess
import time

from orchestry.bookkeeping.gpu_watch import GpuWatch, tree


def test_a_tree_holds_the_children_of_its_root() -> None:
    proc = subprocess.Popen(["bash", "-c", "sleep 3 & sleep 3; wait"])
    try:
        time.sleep(0.5)
        assert len(tree(proc.pid)) == 3 and proc.pid in tree(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_without_nvidia_smi_nothing_is_recorded() -> None:
    watch = GpuWatch()
    watch.available = False
    watch.look({"stage": 1}, force=True)
    assert watch.peak == {}
