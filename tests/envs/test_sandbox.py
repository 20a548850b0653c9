"""The sandbox on real isolated runs: correct, wrong and broken programs, and a hostile suite."""

from __future__ import annotations

import ast
import hashlib
import math
import os
import secrets
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import limits
from xdist_marks import one_process

from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.code.sandbox import (
    SandboxJob,
    SandboxLimits,
    SandboxUnavailable,
    TestReport,
    check_isolation_available,
    default_hidden_paths,
    harden_snippet,
    run_many,
    run_tests_in_sandbox,
    strict_operators,
)
from orchestry.envs.code.sandbox.isolation import CHILD_FILES, HARNESS, isolation_problem
from orchestry.envs.code.sandbox.records import report_from_records
from orchestry.envs.code.sandbox.runner import near_cpu_limit

pytestmark = one_process(__name__)

REPO = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve()
ADD = "def add(a, b):\n    return a + b\n"
# Programs expected to finish get a wall clock that stays generous on a loaded machine; programs
# that hog the CPU until they are stopped get a short one (and run apart from the others).
ROOMY = limits(timeout_s=10.0, cpu_s=5, memory_mb=256)
HOG = limits(timeout_s=2.0, cpu_s=2, memory_mb=256)
HOGS = ("infinite_loop", "infinite_loop_in_test", "fork_bomb", "deep_recursion")


def run(
    program: str,
    *tests: str,
    entry_point: str | None = "add",
    setup: str = "",
    limits: SandboxLimits = ROOMY,
) -> TestReport:
    return run_tests_in_sandbox(SandboxJob(program, tests, setup, entry_point), limits)


# --- ordinary programs ----------------------------------------------------------------------


def test_isolation_is_available_here() -> None:
    check_isolation_available()


def test_correct_program_passes_float_tolerance_loops_and_candidate() -> None:
    r = run(
        ADD + "print('hello from the program')",
        "assert candidate(2, 3) == 5",
        "assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9",
        "for x in range(3):\n    assert candidate(x, 1) >= 1",
        "assert add(1, 1) == 2 and candidate(1, 1) == 2",
        "assert candidate([1], [2]) == [1, 2] != [2, 1]",
    )
    assert r.passed == (True,) * 5
    assert (r.first_failure, r.syntax_error, r.load_error, r.timed_out) == (None, None, None, False)
    assert r.output == "hello from the program\n"
    assert r.n_passed == 5 and r.pass_rate == 1.0


def test_wrong_program_fails_with_the_first_failure_named() -> None:
    r = run(
        "def add(a, b):\n    return a * b\n",
        "assert candidate(2, 2) == 4",
        "assert candidate(1, 2) == 3, 'expected 3'",
        "assert candidate(0, 5) == 5",
    )
    assert r.passed == (True, False, False)
    assert r.first_failure == "test 2: AssertionError: expected 3"
    assert r.pass_rate == pytest.approx(1 / 3)


def test_missing_helper_is_a_name_error_in_the_test() -> None:
    r = run("def main(x):\n    return aux(x)\n", "assert candidate(1) == 2", entry_point="main")
    assert r.passed == (False,)
    assert r.first_failure == "test 1: NameError: name 'aux' is not defined"


def test_syntax_error_reported_with_its_line() -> None:
    r = run("def add(a, b):\n    return a +\n", "assert candidate(1, 2) == 3")
    assert r.passed == (False,)
    assert r.syntax_error == "line 2: invalid syntax"
    assert r.load_error is None


def test_load_error_stops_before_the_tests() -> None:
    r = run(ADD + "raise ValueError('boom at import')\n", "assert candidate(1, 2) == 3")
    assert r.passed == (False,)
    assert r.load_error == "ValueError: boom at import"
    assert r.first_failure == "test 1: no result (the program failed to load)"


def test_missing_entry_point_is_a_load_error() -> None:
    r = run("def other():\n    pass\n", "assert candidate(1, 2) == 3")
    assert r.passed == (False,)
    assert r.load_error == "NameError: entry point 'add' is not defined"


def test_main_guard_does_not_run_and_stdlib_imports_work() -> None:
    program = (
        "import collections, functools, heapq, itertools, json, math, re, typing\n"
        "def add(a, b):\n    return math.fsum([a, b])\n"
        "if __name__ == '__main__':\n    add(int(input()), 1)\n"
    )
    assert run(program, "assert candidate(1, 2) == 3").passed == (True,)


def test_setup_data_and_per_test_namespaces() -> None:
    r = run(
        ADD,
        "x = candidate(*CASES[0])",
        "try:\n    x\nexcept NameError:\n    pass\nelse:\n    raise AssertionError('leaked')",
        "assert [candidate(a, b) for a, b in CASES] == [3, 7]",
        setup="CASES = [(1, 2), (3, 4)]\n",
    )
    assert r.passed == (True, True, True)
    broken = run(ADD, "assert True", setup="raise RuntimeError('bad setup')")
    assert broken.passed == (False,)
    assert broken.load_error == "setup: RuntimeError: bad setup"


def test_timeout_keeps_the_results_of_finished_tests() -> None:
    program = "def f(x):\n    while x < 0:\n        pass\n    return x\n"
    r = run(
        program,
        "assert candidate(1) == 1",
        "candidate(-1)",
        "assert candidate(2) == 2",
        entry_point="f",
        limits=limits(timeout_s=2.0, cpu_s=5),
    )
    assert r.passed == (True, False, False)
    assert r.timed_out
    assert r.first_failure == "test 2: no result (timed out)"


def test_cpu_limit_counts_as_a_timeout() -> None:
    program = "def f(x):\n    while True:\n        pass\n"
    lim = limits(timeout_s=10.0, cpu_s=1)
    r = run(program, "candidate(1)", entry_point="f", limits=lim)
    assert r.timed_out and r.passed == (False,)
    assert r.first_failure == "test 1: no result (CPU time limit exceeded)"
    # The harness reports the CPU time the program's process used, here all of it.
    assert r.cpu_used_s is not None and 0.9 <= r.cpu_used_s <= 2.1
    quick = run(ADD, "assert add(1, 2) == 3")
    assert quick.cpu_used_s is not None and quick.cpu_used_s < 0.5


def test_default_limits_end_a_memory_filling_program_far_from_the_cpu_limit() -> None:
    """A model-written program that fills the address space in every test, scored by default.

    Each call raises MemoryError once the address space is full. Under the earlier 1 GiB limit
    its seven tests took 4.4-4.9 s of CPU against `cpu_s` 5, so on a loaded machine the seventh
    test sometimes never ran, and a fresh `make repro` scored it 0/7 instead of 1/7
    (docs/troubleshooting.md). Under the default limit it ends far from `cpu_s`.
    """
    program = (
        "import itertools\n\n"
        "def top_words(text: str, k: int=3) -> list[str]:\n"
        "    return [(text, t, k) for t in itertools.permutations("
        "[word for word in text if len(word) == k])][:k]\n"
    )
    (problem,) = [p for p in load_problem_dir(REPO / "data" / "coop") if p.id == "coop/top_words"]
    job = SandboxJob(program, problem.tests, problem.setup, problem.main.name)
    lim = limits(timeout_s=30.0)  # the default limits, and wall clock to spare on a busy machine
    r = run_tests_in_sandbox(job, lim)
    assert r.n_passed == 1 and not r.timed_out
    assert "MemoryError" in (r.first_failure or "")
    assert r.cpu_used_s is not None and r.cpu_used_s < lim.cpu_s / 2


def test_invalid_tests_and_limits_are_refused_at_the_boundary() -> None:
    with pytest.raises(ValueError, match="test 2 of the job"):
        run(ADD, "assert True", "assert (")
    with pytest.raises(ValueError, match="timeout_s"):
        limits(timeout_s=0)
    with pytest.raises(ValueError, match="hidden_paths"):
        limits(hidden_paths=("/",))


def test_isolation_problem_names_what_is_missing() -> None:
    child = CHILD_FILES
    assert isolation_problem(0, "/usr/bin/unshare", "/bin/sh", child) is None
    assert "needs root" in (isolation_problem(1000, "/usr/bin/unshare", "/bin/sh", child) or "")
    assert "unshare" in (isolation_problem(0, None, "/bin/sh", child) or "")
    gone = (HARNESS, HARNESS.with_name("no_such_part.py"))
    assert "no_such_part.py is missing" in (
        isolation_problem(0, "/bin/unshare", "/bin/sh", gone) or ""
    )


def test_a_broken_strict_operators_source_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The child side is compiled before anything starts: a bad copy runs no code."""
    broken = tmp_path / "strict_operators.py"
    broken.write_text("def make_strict_helpers(:\n")
    monkeypatch.setattr("orchestry.envs.code.sandbox.runner.STRICT_OPERATORS", broken)
    never_ready = "strict_operators.py does not compile"
    with pytest.raises(SandboxUnavailable, match=never_ready) as e:
        run(ADD + "print('the program ran')", "assert True")
    assert "the program ran" not in str(e.value)


def test_default_hidden_paths_cover_this_checkout() -> None:
    assert str(REPO) in default_hidden_paths()
    assert str(REPO) in limits().hidden_paths


def test_child_side_files_use_the_standard_library_only() -> None:
    """The child runs on the base interpreter with the repository hidden: no project imports."""
    for path in CHILD_FILES:
        tree = ast.parse(path.read_text())
        # Imports under `if TYPE_CHECKING:` never run (the flag is False at run time).
        for node in tree.body:
            if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0 and node.module, (path.name, ast.dump(node))
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                assert top in sys.stdlib_module_names, (path.name, name)


def test_a_sandbox_that_never_got_ready_fails_loudly() -> None:
    refused = "unshare: unshare failed: Operation not permitted"
    with pytest.raises(SandboxUnavailable, match="exited before it got ready.*not permitted"):
        report_from_records(1, [], refused, killed=False)


# --- the hardened comparisons keep Python's meaning on builtin values ---------------------------


def _run_hardened(source: str) -> dict[str, object]:
    ns: dict[str, object] = dict(strict_operators.make_strict_helpers())
    exec(harden_snippet(source), ns)
    return ns


@pytest.mark.parametrize(
    "expr",
    [
        "1 == 1.0 == True",
        "[1, (2, 3), {'a': {4}}] == [1, (2, 3), {'a': frozenset({4})}]",
        "{1: 'a'} != {1: 'b'}",
        "[NAN] == [NAN] and [float('nan')] != [NAN]",
        "1 < 2 <= 2 > 0",
        "not (3 < 2 < 1)",
        "3 in range(5) and 'b' in 'abc' and 4 not in {1: 2}",
        "None is None and [] is not None",
        "abs(0.1 + 0.2 - 0.3) < 1e-9",
        "(-5) // 2 == -3 and 2 ** 10 == 1024 and 7 % 3 == 1 and ~0 == -1",
        "([] or 'x') == 'x' and (0 and 1) == 0",
        "[y for y in range(6) if y % 2] == [1, 3, 5]",
        "('yes' if [0] else 'no') == 'yes'",
        "type(3) == int and type('') is not bytes and isinstance(True, int)",
    ],
)
def test_hardened_expressions_keep_builtin_semantics(expr: str) -> None:
    ns = _run_hardened(f"NAN = float('nan')\nresult = {expr}")
    assert ns["result"] is True
    assert "__sandbox_" in harden_snippet(expr)


def test_hardened_code_calls_exactly_the_strict_operators() -> None:
    """hardening and strict_operators name the same helpers: a mismatch would fail every test."""
    every_construct = "a = [1]\na += [2]\nb = -len(a)\nassert a == [1, 2] and 0 < 1 < 2\nc = 1 + 2"
    called = {
        node.id
        for node in ast.walk(ast.parse(harden_snippet(every_construct)))
        if isinstance(node, ast.Name) and node.id.startswith("__sandbox_")
    }
    assert called == set(strict_operators.HELPER_NAMES)


def test_hardened_augmented_assignment_mutates_lists_in_place() -> None:
    ns = _run_hardened("a = [1]\nb = a\na += [2]\nn = 1\nn -= 3")
    assert ns["b"] == [1, 2] and ns["a"] is ns["b"] and ns["n"] == -2


def test_hardened_code_refuses_objects_that_fake_answers() -> None:
    class Always:
        def __eq__(self, other: object) -> bool:
            return True

        def __bool__(self) -> bool:
            return True

        def __sub__(self, other: object) -> float:
            return 0.0

    tests = (
        "assert x == 5",
        "assert x",
        "assert abs(x - 0.5) < 1e-6",
        "assert not x != 5",
        "assert type(x) == int",
    )
    for test in tests:
        ns = dict(strict_operators.make_strict_helpers(), x=Always())
        with pytest.raises(Exception, match="needs builtin values"):
            exec(harden_snippet(test), ns)


# --- the hostile suite ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def canaries() -> Iterator[list[Path]]:
    """World-writable canaries in /tmp and /var/tmp: any uid could delete them without isolation."""
    made = []
    for base in ("/tmp", "/var/tmp"):
        directory = Path(tempfile.mkdtemp(prefix="orchestry-canary-", dir=base))
        directory.chmod(0o777)
        canary = directory / "canary.txt"
        canary.write_text("canary")
        canary.chmod(0o666)
        made.append(canary)
    yield made
    for canary in made:
        canary.unlink(missing_ok=True)
        for leftover in canary.parent.iterdir():
            leftover.unlink()
        canary.parent.rmdir()


@pytest.fixture(scope="module")
def hostile(canaries: list[Path]) -> Iterator[dict[str, object]]:
    """Run the hostile programs (two run_many batches) under a planted API key and a listener."""
    key = "sk-ant-test-" + secrets.token_hex(12)
    marker = "orchestry-leftover-" + secrets.token_hex(6)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    data_file = next(iter(sorted((REPO / "data").rglob("*.yaml"))), THIS_FILE)
    key_hash = hashlib.sha256(key.encode()).hexdigest()
    wrong = (
        "assert candidate(2) == 5",
        "assert abs(candidate(2) - 5) < 1e-6",
        "assert candidate(2)",
    )
    programs: dict[str, tuple[str, tuple[str, ...]]] = {
        "infinite_loop": ("while True:\n    pass\n", wrong),
        "infinite_loop_in_test": ("def f(x):\n    while True:\n        pass\n", wrong),
        "fork_bomb": (
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
            "        pass\n",
            wrong,
        ),
        "memory_bomb": ("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))\n", wrong),
        "deep_recursion": (
            "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
            wrong,
        ),
        "huge_output": (
            "for _ in range(5000):\n    print('x' * 10000)\ndef f(x):\n    return 0\n",
            wrong,
        ),
        "write_outside": (
            "import os\n"
            f"TARGETS = {[str(c) for c in canaries]!r}\n"
            "def f(x):\n"
            "    for path in TARGETS:\n"
            "        for attack in (lambda: os.remove(path), lambda: open(path, 'w').write('x'),\n"
            "                       lambda: open(path + '.new', 'w').write('x')):\n"
            "            try:\n                attack()\n            except OSError:\n"
            "                pass\n"
            f"    for path in ({str(THIS_FILE)!r}, {str(REPO / 'PWNED')!r}):\n"
            "        try:\n            open(path, 'w').write('pwned')\n        except OSError:\n"
            "            pass\n"
            "    open('inside_tmp.txt', 'w').write('allowed')\n"
            "    return 0\n",
            wrong,
        ),
        "network": (
            "import socket\n"
            "def f(x):\n    s = socket.socket()\n    s.settimeout(1)\n"
            f"    s.connect(('127.0.0.1', {port}))\n    return 5\n",
            wrong,
        ),
        "sys_exit_at_load": ("import sys\nsys.exit(0)\ndef f(x):\n    return 5\n", wrong),
        "os_exit_at_load": ("import os\nos._exit(0)\ndef f(x):\n    return 5\n", wrong),
        "exits_in_tests": (
            "import os, sys\nclass Escape(BaseException):\n    pass\n"
            "def f(how):\n    if how == 'sys':\n        sys.exit(0)\n"
            "    if how == 'kbd':\n        raise KeyboardInterrupt\n"
            "    if how == 'base':\n        raise Escape()\n"
            "    os._exit(0)\n",
            (
                "candidate('sys')",
                "candidate('kbd')",
                "candidate('base')",
                "candidate('os')",
                "assert True",
            ),
        ),
        "fake_pass_records": (
            "import os\nprint('PASSED\\nall tests passed\\nok')\n"
            "for fd in range(1, 256):\n"
            "    for index in range(1, 4):\n"
            "        try:\n"
            "            os.write(fd, b'0' * 32 + b' P %d \\n' % index)\n"
            "            os.write(fd, b'0' * 32 + b' C 0 \\n')\n"
            "        except OSError:\n            pass\n"
            "def f(x):\n    print('PASSED')\n    return 0\n",
            wrong,
        ),
        "always_equal": (
            "class Meta(type):\n    def __eq__(cls, other):\n        return True\n"
            "    def __hash__(cls):\n        return hash(int)\n"
            "class E(int, metaclass=Meta):\n"
            "    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
            "    __bool__ = lambda s: True\n    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
            "    __sub__ = __rsub__ = __abs__ = lambda s, *o: 0.0\n"
            "    __hash__ = int.__hash__\n"
            "def f(x):\n    return E(7)\n",
            wrong
            + (
                "assert not candidate(2) != 5",
                "assert candidate(2) in [5]",
                "if not candidate(2):\n    raise AssertionError",
            ),
        ),
        "patch_builtins": (
            "import builtins, operator, os, sys, marshal\n"
            "for name in ('AssertionError', 'BaseException', 'Exception', 'NameError'):\n"
            "    setattr(builtins, name, KeyError)\n"
            "builtins.isinstance = lambda *a: True\nbuiltins.type = lambda *a: int\n"
            "builtins.print = builtins.len = builtins.range = builtins.str = None\n"
            "builtins.id = lambda x: 0\nbuiltins.exec = lambda *a, **k: None\n"
            "os.write = lambda *a: 0\nos._exit = lambda *a: None\n"
            "operator.eq = operator.lt = operator.gt = lambda a, b: True\n"
            "__builtins__['AssertionError'] = KeyError\n"
            "def f(x):\n    return 0\n",
            wrong,
        ),
        "patch_helpers": (
            "import __main__\n"
            "def f(x):\n"
            "    for ns in (globals(), vars(__main__)):\n"
            "        for name in ('__sandbox_cmp__', '__sandbox_truth__', '__sandbox_binop__'):\n"
            "            ns[name] = lambda *a: True\n"
            "    return 0\n",
            wrong,
        ),
        "read_repo_files": (
            f"def f(x):\n    return open({str(data_file)!r}).read()\n",
            (
                f"assert candidate(2) == {data_file.read_text()!r}",
                f"assert len(__import__('os').listdir({str(REPO)!r})) > 0",
            ),
        ),
        "read_api_key": (
            "import glob, os\n"
            "def f(x):\n"
            "    found = os.environ.get('ANTHROPIC_API_KEY', '')\n"
            "    for path in glob.glob('/proc/*/environ'):\n"
            "        try:\n            data = open(path, 'rb').read()\n"
            "        except OSError:\n            continue\n"
            "        for item in data.split(b'\\0'):\n"
            "            if item.startswith(b'ANTHROPIC_API_KEY='):\n"
            "                found = item.split(b'=', 1)[1].decode()\n"
            "    print('ENV', dict(os.environ))\n"
            "    return found\n",
            (
                f"import hashlib\nassert hashlib.sha256(candidate(2).encode()).hexdigest() == "
                f"{key_hash!r}",
            ),
        ),
        "background_process": (
            "import os, subprocess, sys, time\n"
            "child = os.fork()\n"
            "if child == 0:\n    os.setsid()\n"
            "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(100)', "
            f"{marker!r}])\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(100)', "
            f"{marker!r}], start_new_session=True)\n"
            "print('spawned', child, p.pid)\n"
            "def f(x):\n    return 0\n",
            wrong,
        ),
    }
    jobs = {
        name: SandboxJob(program, tests, entry_point="f")
        for name, (program, tests) in programs.items()
    }
    hogs = [name for name in programs if name in HOGS]
    others = [name for name in programs if name not in HOGS]
    this_file_before = THIS_FILE.read_bytes()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANTHROPIC_API_KEY", key)
        reports = dict(zip(hogs, run_many([jobs[n] for n in hogs], HOG, workers=4), strict=True))
        others_run = run_many([jobs[n] for n in others], ROOMY, workers=4)
        reports.update(zip(others, others_run, strict=True))
    try:
        listener.accept()
        connected = True
    except BlockingIOError:
        connected = False
    finally:
        listener.close()
    yield {
        "reports": reports,
        "key": key,
        "marker": marker,
        "connected": connected,
        "this_file_unchanged": THIS_FILE.read_bytes() == this_file_before,
    }


HOSTILE = [
    "infinite_loop",
    "infinite_loop_in_test",
    "fork_bomb",
    "memory_bomb",
    "deep_recursion",
    "huge_output",
    "write_outside",
    "network",
    "sys_exit_at_load",
    "os_exit_at_load",
    "exits_in_tests",
    "fake_pass_records",
    "always_equal",
    "patch_builtins",
    "patch_helpers",
    "read_repo_files",
    "read_api_key",
    "background_process",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_program_does_not_pass(hostile: dict, name: str) -> None:
    report: TestReport = hostile["reports"][name]
    assert report.passed and not any(report.passed), report
    assert report.first_failure is not None


def test_hostile_loops_and_bombs_time_out_or_fail_to_load(hostile: dict) -> None:
    reports = hostile["reports"]
    for name in ("infinite_loop", "infinite_loop_in_test", "fork_bomb"):
        assert reports[name].timed_out, name
    assert reports["memory_bomb"].load_error == "MemoryError"
    assert reports["sys_exit_at_load"].load_error == "SystemExit: 0"
    assert "ended early: exit code 0" in reports["os_exit_at_load"].first_failure
    exits = reports["exits_in_tests"]
    assert exits.first_failure == "test 1: SystemExit: 0"
    assert exits.passed == (False,) * 5


def test_hostile_output_is_capped(hostile: dict) -> None:
    output = hostile["reports"]["huge_output"].output
    assert output.startswith("x" * 10000)
    assert len(output.encode()) < ROOMY.max_output_kb * 1024 + 100
    assert output.endswith("KB discarded]")


def test_hostile_code_changes_nothing_outside_its_tmp(hostile: dict, canaries: list[Path]) -> None:
    for canary in canaries:
        assert stat.S_IMODE(canary.parent.stat().st_mode) == 0o777  # reachable without isolation
        assert canary.read_text() == "canary"
        assert sorted(p.name for p in canary.parent.iterdir()) == ["canary.txt"]
    assert hostile["this_file_unchanged"]
    assert not (REPO / "PWNED").exists()
    assert not Path("/tmp/inside_tmp.txt").exists()


def test_hostile_code_gets_no_network_no_key_no_repo(hostile: dict) -> None:
    reports = hostile["reports"]
    assert not hostile["connected"]
    assert "Network is unreachable" in reports["network"].first_failure
    assert hostile["key"] not in reports["read_api_key"].output
    assert "'HOME': '/tmp'" in reports["read_api_key"].output  # the program did print its env
    assert "No such file or directory" in reports["read_repo_files"].first_failure


def test_hostile_forgeries_and_patches_are_ignored(hostile: dict) -> None:
    reports = hostile["reports"]
    assert "PASSED" in reports["fake_pass_records"].output
    assert "not a plain value" in reports["always_equal"].first_failure
    assert reports["patch_builtins"].first_failure == "test 1: AssertionError"
    assert reports["patch_helpers"].first_failure == "test 1: AssertionError"


def test_hostile_background_processes_do_not_survive(hostile: dict) -> None:
    assert "spawned" in hostile["reports"]["background_process"].output
    leftovers = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if hostile["marker"].encode() in cmdline:
                leftovers.append(proc.name)
    assert leftovers == []


def test_patched_builtins_do_not_break_the_harness() -> None:
    """A correct program that vandalises builtins, os and operator still gets honest passes."""
    program = (
        "import builtins, operator, os\n"
        "builtins.len = builtins.range = builtins.isinstance = builtins.str = None\n"
        "builtins.type = lambda *a: int\nbuiltins.exec = builtins.compile = None\n"
        "builtins.BaseException = builtins.AssertionError = KeyError\n"
        "operator.eq = operator.lt = lambda a, b: False\nos.write = lambda *a: 0\n" + ADD
    )
    r = run(
        program,
        "assert candidate(2, 3) == 5",
        "assert candidate(1, 1) == 3",
        "assert candidate(1, 2) < 4",
    )
    assert r.passed == (True, False, True)
    assert r.first_failure == "test 2: AssertionError"


# --- parallel runs --------------------------------------------------------------------------


def test_run_many_matches_one_by_one() -> None:
    programs = [
        ADD,
        "def add(a, b):\n    return a - b\n",
        "def add(a, b)\n    return a\n",
        "raise KeyError('k')\n",
        "import os\nos._exit(3)\n",
        "def add(a, b):\n    print(a, b)\n    return a + b\n",
        "def add(a, b):\n    while a:\n        pass\n",
        "class E:\n    __eq__ = lambda s, o: True\ndef add(a, b):\n    return E()\n",
    ]
    tests = (
        "assert candidate(2, 3) == 5",
        "assert candidate(0, 0) == 0",
        "assert math.isclose(candidate(0.5, 0.25), 0.75)",
    )
    jobs = [SandboxJob(p, tests, setup="import math", entry_point="add") for p in programs] * 2
    lim = limits(timeout_s=2.5, cpu_s=5, memory_mb=256)
    together = run_many(jobs, lim, workers=4)
    alone = [run_tests_in_sandbox(job, lim) for job in jobs[: len(programs)]] * 2
    assert together == alone
    assert together[0].passed == (True, True, True)
    assert together[6].timed_out and together[6].passed == (False, False, False)
    assert math.isclose(sum(r.pass_rate for r in together), 2 * (1 + 1 / 3 + 1))
    assert run_many([], lim, workers=2) == []


def test_run_many_names_programs_near_the_cpu_limit(caplog: pytest.LogCaptureFixture) -> None:
    busy = "def add(a, b):\n    n = 0\n    while n < 10 ** 9:\n        n += 1\n    return a + b\n"
    lim = limits(timeout_s=10.0, cpu_s=1)
    with caplog.at_level("WARNING", logger="orchestry.envs.code.sandbox.runner"):
        reports = run_many([SandboxJob(ADD, ("assert add(1, 2) == 3",))] * 2, lim, workers=2)
    assert not caplog.records and near_cpu_limit(reports, lim) == []
    half = replace(reports[0], cpu_used_s=0.6)
    stopped = replace(reports[0], cpu_used_s=1.0, timed_out=True)
    assert near_cpu_limit([reports[0], half, stopped], lim) == [1]
    with caplog.at_level("WARNING", logger="orchestry.envs.code.sandbox.runner"):
        run_many([SandboxJob(busy, ("add(1, 2)",), entry_point="add")], lim, workers=1)
    assert not caplog.records  # stopped by the limit: its score does not hinge on the edge


def test_parallel_sandboxes_get_distinct_uids() -> None:
    program = "import os\ndef f():\n    return os.getuid()\nprint(os.getuid())\n"
    jobs = [SandboxJob(program, ("assert candidate() > 0",), entry_point="f")] * 4
    slow = SandboxJob("import os, time\nprint(os.getuid())\ntime.sleep(1.0)\n", ("assert True",))
    reports = run_many([slow, slow, slow], ROOMY, workers=3)
    uids = {r.output.strip() for r in reports}
    assert len(uids) == 3 and all(int(u) >= 1_900_000_000 for u in uids)
    assert all(r.passed == (True,) for r in run_many(jobs, ROOMY, workers=2))
    assert os.geteuid() == 0  # the test process itself never changed uid
