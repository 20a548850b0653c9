"""`make test` keeps each `xdist_group` on one process (`--dist loadgroup`).

pytest 9.2 stopped reading the node-id suffix that pytest-xdist 3.8 writes to group tests, so every
group was split over both processes: the shared tiny pipeline (conftest.py `tiny_pipeline`, minutes)
was built once per process, and the tests that must not run side by side (DVC in the repository
root, the SLURM daemons) could. requirements-lock.txt pins a pytest that works with it; this test runs
a throwaway suite the way `make test` runs the real one and fails if a group is split again."""

import getpass
import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    with open(os.environ["WORKERS_FILE"], "a") as f:
        f.write(f"grouped {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""
FREE = """
import os
import time
import pytest


@pytest.mark.parametrize("i", range(6))
def test_free(i):
    time.sleep(0.2)
    with open(os.environ["WORKERS_FILE"], "a") as f:
        f.write(f"free {os.environ['PYTEST_XDIST_WORKER']}\\n")
"""


def run_suite(folder: Path) -> list[str]:
    """Run the throwaway suite in `folder` as `make test` runs the real one (two processes,
    `--dist loadgroup`, conftest's order); the lines its tests wrote to WORKERS_FILE.

    Its temporary files stay in `folder` (`--basetemp`): with pytest's numbered folders it deleted
    all but the newest three under the machine's temp root, other runs' gigabytes of tiny pipelines
    among them (this test took 53 and 63 s in two `make test` runs, 3 to 5 s alone). Three older
    numbered folders in a temp root of its own check that it leaves them alone."""
    workers = folder / "workers.txt"
    root = folder / "temproot"
    older = [root / f"pytest-of-{getpass.getuser()}" / f"pytest-{n}" for n in (1, 2, 3)]
    for made in older:
        made.mkdir(parents=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup"]
    argv += ["--no-loadscope-reorder", "--basetemp", str(folder / "basetemp")]
    argv += ["-p", "no:cacheprovider", "-o", "addopts=", str(folder)]
    env = {**os.environ, "WORKERS_FILE": str(workers), "PYTEST_DEBUG_TEMPROOT": str(root)}
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(made.is_dir() for made in older), "the suite deleted other runs' temp folders"
    return workers.read_text().splitlines()


@pytest.mark.slow  # starts processes: the slow tier (make test), not the edit loop
def test_a_group_runs_on_one_process(tmp_path):
    (tmp_path / "test_grouped.py").write_text(SUITE)
    (tmp_path / "test_free.py").write_text(FREE)
    lines = [line.split() for line in run_suite(tmp_path)]
    grouped = {w for kind, w in lines if kind == "grouped"}
    assert len([1 for kind, _ in lines if kind == "grouped"]) == 6
    assert len(grouped) == 1, f"the group ran on {sorted(grouped)}"


SHARED = """
import os
import sys
import time

import pytest

sys.path.insert(0, {tests!r})
from xdist_marks import one_process

pytestmark = one_process(__name__)


@pytest.fixture(scope="module")
def built():
    with open(os.environ["WORKERS_FILE"], "a") as f:
        f.write(f"built {{os.environ['PYTEST_XDIST_WORKER']}}\\n")


@pytest.mark.parametrize("i", range(6))
def test_shared(built, i):
    time.sleep(0.2)
"""


@pytest.mark.slow
def test_a_module_marked_one_process_builds_its_module_fixture_once(tmp_path):
    """conftest.one_process: the module's tests stay on one process, so its fixture is built once
    (unmarked, `--dist loadgroup` sends the module's tests to both processes, and each builds it)."""
    tests = os.path.dirname(os.path.abspath(__file__))
    (tmp_path / "test_shared.py").write_text(SHARED.format(tests=tests))
    (tmp_path / "test_free.py").write_text(FREE)
    built = [line for line in run_suite(tmp_path) if line.startswith("built")]
    assert len(built) == 1, built
