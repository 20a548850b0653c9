"""White-box attacks on the sandbox: no program in tests/envs/attacks/ may pass a single test.

Each attack is one file, a whole model program whose `add(a, b)` is wrong and which tries to make
the tests of `add` pass anyway by reaching into whatever runs it (gc and frame walks, reading the
tests' constants, forged result records, ctypes, signals, threads, non-plain return values, patched
builtins, early exits). tests/envs/attacks/README.md describes the format; a new attack is a new
file there. Attacks kept outside the repository run too when a directory holds them:

    ORCHESTRY_EXTRA_ATTACKS=/path/to/dir .venv/bin/pytest tests/envs/test_whitebox_attacks.py

Only the public API is used (SandboxJob, run_tests_in_sandbox, SandboxLimits), so the suite holds
for any implementation of the sandbox. Every attack runs once, two at a time, in a module-scoped
fixture; each then gets its own parametrized assertion. Skipped where isolation is unavailable.
"""

from __future__ import annotations

import ast
import fnmatch
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import limits
from xdist_marks import one_process

from orchestry.envs.code.sandbox import (
    SandboxJob,
    SandboxUnavailable,
    TestReport,
    check_isolation_available,
    run_tests_in_sandbox,
)

pytestmark = one_process(__name__)

ATTACKS_DIR = Path(__file__).resolve().parent / "attacks"
EXTRA_ENV = "ORCHESTRY_EXTRA_ATTACKS"
MIN_ATTACKS = 12
ADD_TESTS = (
    "assert candidate(1, 2) == 3",
    "assert candidate(-5, 5) == 0",
    "assert candidate(10**20, 1) == 10**20 + 1",
    "assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9",
    "assert candidate(2, 2) == 4",
    "assert candidate(7, -3) == 4",
)
# A few seconds of wall clock: an attack that hangs costs at most this (plus the start-up grace).
LIMITS = limits(timeout_s=4.0, cpu_s=3, memory_mb=512)
WORKERS = 2
CORRECT_ADD = "def add(a, b):\n    return a + b\n"
WRONG_ADD = "def add(a, b):\n    return a - b\n"


def attack_files() -> dict[str, Path]:
    """Every attack by id: the repository's by file stem, the extra directory's as extra/<stem>."""
    files = {path.stem: path for path in sorted(ATTACKS_DIR.glob("*.py"))}
    extra = os.environ.get(EXTRA_ENV)
    if extra:
        for path in sorted(Path(extra).expanduser().glob("*.py")):
            files[f"extra/{path.stem}"] = path
    return files


ATTACKS = attack_files()


def run_add_tests(program: str) -> TestReport | Exception:
    """The report of `program` against ADD_TESTS, or what the sandbox raised instead."""
    try:
        return run_tests_in_sandbox(SandboxJob(program, ADD_TESTS, entry_point="add"), LIMITS)
    except Exception as exc:  # one attack that breaks the sandbox must not hide the others
        return exc


@pytest.fixture(scope="module")
def sandbox_ready() -> None:
    try:
        check_isolation_available()
    except SandboxUnavailable as exc:
        pytest.skip(f"sandbox isolation is unavailable here: {exc}")


@pytest.fixture(scope="module")
def reports(sandbox_ready: None) -> dict[str, TestReport | Exception]:
    """Every attack's report, run WORKERS at a time (per-attack results, unlike run_many)."""
    names = list(ATTACKS)
    programs = [ATTACKS[name].read_text(encoding="utf-8") for name in names]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = list(pool.map(run_add_tests, programs))
    return dict(zip(names, results, strict=True))


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_forges_no_pass(reports: dict[str, TestReport | Exception], name: str) -> None:
    result = reports[name]
    if isinstance(result, Exception):
        pytest.fail(f"attack {name}: the sandbox raised instead of reporting: {result!r}")
    # A program that does not even compile attacks nothing: it would pass here vacuously.
    assert result.syntax_error is None, f"attack {name} has a syntax error: {result}"
    assert len(result.passed) == len(ADD_TESTS), f"attack {name}: {result}"
    assert result.n_passed == 0, f"attack {name} forged {result.n_passed} pass(es): {result}"


# --- controls: the suite cannot pass vacuously ----------------------------------------------


def test_a_correct_add_passes_every_test(sandbox_ready: None) -> None:
    report = run_add_tests(CORRECT_ADD)
    assert isinstance(report, TestReport), report
    assert report.passed == (True,) * len(ADD_TESTS), report


def test_the_plain_wrong_add_fails_every_test(sandbox_ready: None) -> None:
    """The attacks' wrong answer (a - b) fails each test on its own: any pass they get is forged."""
    report = run_add_tests(WRONG_ADD)
    assert isinstance(report, TestReport), report
    assert report.passed == (False,) * len(ADD_TESTS), report
    assert report.first_failure == "test 1: AssertionError", report


def test_there_are_enough_well_formed_attacks() -> None:
    """At least MIN_ATTACKS in the repository, each valid Python with a docstring and an `add`."""
    own = sorted(ATTACKS_DIR.glob("*.py"))
    assert len(own) >= MIN_ATTACKS, [p.name for p in own]
    for path in [*own, *(p for name, p in ATTACKS.items() if name.startswith("extra/"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstring = ast.get_docstring(tree) or ""
        assert docstring.startswith("Attack:"), f"{path}: no 'Attack: ...' docstring"
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        assigned = {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        assert "add" in defined | assigned, f"{path}: defines no top-level add"


def test_attack_files_are_data_pytest_never_imports() -> None:
    for path in ATTACKS_DIR.iterdir():
        assert not any(fnmatch.fnmatch(path.name, p) for p in ("test_*.py", "*_test.py")), path
    assert not (ATTACKS_DIR / "__init__.py").exists()
    assert not (ATTACKS_DIR / "conftest.py").exists()


def test_extra_attacks_directory_is_usable() -> None:
    extra = os.environ.get(EXTRA_ENV)
    if not extra:
        pytest.skip(f"{EXTRA_ENV} is not set")
    directory = Path(extra).expanduser()
    assert directory.is_dir(), f"{EXTRA_ENV}={extra!r} is not a directory"
    assert any(name.startswith("extra/") for name in ATTACKS), f"no *.py file in {directory}"
