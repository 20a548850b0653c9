"""Run model-written Python and its tests in an isolated child process; report per-test pass/fail.

Each program runs under ``unshare --net --mount --pid --fork --kill-child --mount-proc`` on the base
interpreter (stdlib only), driven by `orchestry/envs/code/sandbox/harness.py`:

- no network (an empty network namespace), its own /proc, and a pid namespace whose processes all
  die when the run ends: nothing is left behind;
- the repository and the home directory are under empty tmpfs mounts (the interpreter is bound back
  read-only), the root filesystem is remounted read-only and nosuid, and /tmp and /dev/shm are
  private size-capped tmpfs mounts that vanish with the namespace, so the code can neither read the
  problems' expected values nor change a file outside its own scratch space;
- the code runs as a uid reserved for this run alone (a flock per uid, so parallel sandboxes never
  share RLIMIT_NPROC counts), with rlimits on CPU, address space, processes, file size and core
  dumps, no new privileges, and an environment of PATH, LANG, HOME and PYTHONHASHSEED only;
- the tests travel on stdin, never through a file.

Results come back on a dedicated SOCK_SEQPACKET socket, one record per outcome, each tagged with a
random per-run nonce; stdout and stderr are only captured (capped) for feedback, so printing
"PASSED", exiting early (`sys.exit(0)`, `os._exit(0)`, `SystemExit`, `KeyboardInterrupt`) or
writing junk to any fd never counts as a pass: a test passes only when its own record says so.

Always-equal objects: `harden_snippet` rewrites every test and the setup before they run. Each
comparison (``==, !=, <, <=, >, >=, in, not in, is, is not``), each truth test (assert, if, while,
``not``, ``and``/``or``, conditional expressions, comprehension filters) and each arithmetic
operator goes through a helper that accepts only values whose exact type is a builtin value type
(int, float, bool, complex, str, bytes, None, range, the builtin classes themselves, and
list/tuple/dict/set/frozenset of those, checked recursively by type identity) and raises otherwise,
failing the test. Builtin values keep
Python's semantics, so ``assert abs(candidate(x) - 0.5) < 1e-6`` works as usual. A test whose
intended answer is an instance of a class (even one defined in the setup) cannot pass.

Residual risk, accepted: the harness runs the untrusted code in its own interpreter. Code that
deliberately introspects that interpreter (walks frames with ``sys._getframe``, scans
``gc.get_objects()``, reads memory through ``ctypes``) can find the result socket's fd and the
nonce and forge records. Patching ``builtins``, ``os``, ``sys`` or ``operator`` cannot, because the
harness bound everything it uses before the code ran. Calls to builtins that dispatch to a dunder
of an untrusted object in test code (``str(x)``, ``len(x)``, ``float(x)``) are not intercepted; they
can only produce an answer the object already knows.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import functools
import marshal
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HARNESS = Path(__file__).with_name("harness.py")
# Each run gets the first free uid of this range; these uids own no files on the host.
SANDBOX_UID_BASE = 1_900_000_000
SANDBOX_UID_SLOTS = 256
# Extra wall clock the parent allows over timeout_s (interpreter start, mounts) before it kills.
_START_GRACE_S = 5.0
# After a kill, how long the parent keeps draining the pipes while the namespace is torn down.
_DRAIN_S = 2.0
_RECORD_MAX = 8192
_CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp",
    "PYTHONHASHSEED": "0",
}


class SandboxUnavailable(RuntimeError):
    """Isolation cannot be set up here (not root, no unshare, mounts refused); nothing was run."""


def default_hidden_paths() -> tuple[str, ...]:
    """Directories the sandboxed code must not see: this checkout, the venv, the home directory."""
    paths = {str(Path(__file__).resolve().parents[4]), str(Path.home().resolve())}
    if sys.prefix != sys.base_prefix:
        paths.add(str(Path(sys.prefix).resolve()))
    return tuple(sorted(paths))


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits for one program and its tests."""

    timeout_s: float = 5.0
    """Wall clock for the whole program and its tests."""
    cpu_s: int = 5
    """RLIMIT_CPU of the process running the code (SIGXCPU, then SIGKILL one second later)."""
    memory_mb: int = 1024
    """RLIMIT_AS of that process."""
    max_processes: int = 8
    """RLIMIT_NPROC of the sandbox uid (binds because the code does not run as root)."""
    max_file_mb: int = 8
    """RLIMIT_FSIZE; the private /tmp holds at most four times this."""
    max_output_kb: int = 32
    """stdout and stderr kept; the rest is read and discarded."""
    hidden_paths: tuple[str, ...] = field(default_factory=default_hidden_paths)
    """Directories replaced by an empty tmpfs inside the sandbox."""

    def __post_init__(self) -> None:
        for name in (
            "timeout_s",
            "cpu_s",
            "memory_mb",
            "max_processes",
            "max_file_mb",
            "max_output_kb",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value}")
        for path in self.hidden_paths:
            if not os.path.isabs(path) or os.path.normpath(path) == "/":
                raise ValueError(f"SandboxLimits.hidden_paths: {path!r} must be absolute and not /")


@dataclass(frozen=True)
class TestReport:
    """What happened to one program and its tests."""

    __test__ = False  # not a pytest test class

    passed: tuple[bool, ...]
    """One per test snippet, in order; tests not reached count False."""
    first_failure: str | None
    """E.g. "test 2: AssertionError: expected 3"; None when every test passed."""
    syntax_error: str | None
    """E.g. "line 3: invalid syntax" when the program does not compile (then all tests False)."""
    load_error: str | None
    """Exception raised by the program's top level, the setup, or a missing entry point."""
    timed_out: bool
    """The wall clock or the CPU time limit ran out."""
    output: str
    """Captured stdout and stderr of the code, capped."""

    @property
    def n_passed(self) -> int:
        return sum(self.passed)

    @property
    def pass_rate(self) -> float:
        return self.n_passed / len(self.passed) if self.passed else 0.0


@dataclass(frozen=True)
class SandboxJob:
    """A program and the tests to run against it."""

    program: str
    """The code under test (e.g. aux + main joined)."""
    tests: tuple[str, ...]
    """Each a Python snippet; a test passes iff the snippet runs without exception."""
    setup: str = ""
    """Trusted preamble run after the program, before the tests (imports, helper data)."""
    entry_point: str | None = None
    """If set, `candidate` is bound to this function of the program before the setup runs."""


# --- test hardening (runs in the parent on trusted text) -------------------------------------

_CMP_SYMBOLS = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
_BINOP_SYMBOLS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
}
_UNARY_SYMBOLS = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~"}


def _helper_call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(
        func=ast.Name(id=f"__sandbox_{name}__", ctx=ast.Load()), args=list(args), keywords=[]
    )


def _truth(node: ast.expr) -> ast.Call:
    return _helper_call("truth", node)


class _Hardener(ast.NodeTransformer):
    """Route comparisons, truth tests and arithmetic through the harness's strict helpers."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if len(node.ops) == 1:
            op = ast.Constant(_CMP_SYMBOLS[type(node.ops[0])])
            return _helper_call("cmp", op, node.left, node.comparators[0])
        no_args = ast.arguments(
            posonlyargs=[],
            args=[],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        )
        parts: list[ast.expr] = []
        for op, right in zip(node.ops, node.comparators, strict=True):
            parts += [ast.Constant(_CMP_SYMBOLS[type(op)]), ast.Lambda(args=no_args, body=right)]
        return _helper_call("chain", node.left, ast.Tuple(elts=parts, ctx=ast.Load()))

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        op = ast.Constant(_BINOP_SYMBOLS[type(node.op)])
        return _helper_call("binop", op, node.left, node.right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            node.operand = _truth(node.operand)
            return node
        if isinstance(node.operand, ast.Constant):
            return node  # a literal such as -1
        return _helper_call("unary", ast.Constant(_UNARY_SYMBOLS[type(node.op)]), node.operand)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        # `a and b` truth-tests every operand but the last, which it returns unchanged.
        self.generic_visit(node)
        node.values = [_truth(v) for v in node.values[:-1]] + node.values[-1:]
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        self.generic_visit(node)
        op = ast.Constant(_BINOP_SYMBOLS[type(node.op)])
        if isinstance(node.target, ast.Name):
            current = ast.Name(id=node.target.id, ctx=ast.Load())
            return ast.Assign(
                targets=[node.target], value=_helper_call("inplace", op, current, node.value)
            )
        node.value = _truth(node.value)
        return node

    def _guard_test(self, node: ast.If | ast.While | ast.IfExp | ast.Assert) -> ast.AST:
        self.generic_visit(node)
        node.test = _truth(node.test)
        return node

    visit_If = visit_While = visit_IfExp = visit_Assert = _guard_test

    def visit_comprehension(self, node: ast.comprehension) -> ast.comprehension:
        self.generic_visit(node)
        node.ifs = [_truth(c) for c in node.ifs]
        return node


@functools.lru_cache(maxsize=4096)
def harden_snippet(source: str) -> str:
    """Rewrite trusted test or setup code so untrusted objects cannot fake a comparison.

    Raises SyntaxError when `source` is not valid Python.
    """
    tree = _Hardener().visit(ast.parse(source))
    hardened = ast.unparse(ast.fix_missing_locations(tree))
    compile(hardened, "<hardened>", "exec", dont_inherit=True)
    return hardened


# --- isolation preconditions ----------------------------------------------------------------


def _base_python() -> str:
    """The interpreter the venv was made from: it needs nothing from the (hidden) repository."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def isolation_problem(euid: int, unshare: str | None, python: str, harness: Path) -> str | None:
    """What stops the sandbox from running here, or None when the preconditions hold."""
    if euid != 0:
        return (
            f"the sandbox needs root (running as uid {euid}) to create namespaces, mount "
            "tmpfs and switch to an unprivileged sandbox uid; run as root"
        )
    if unshare is None:
        return "`unshare` (util-linux) is not on PATH; install util-linux"
    if not os.access(python, os.X_OK):
        return f"the base interpreter {python} is not executable"
    if not harness.is_file():
        return f"the sandbox harness {harness} is missing"
    return None


@functools.lru_cache(maxsize=1)
def _preconditions() -> tuple[str | None, str]:
    unshare = shutil.which("unshare")
    problem = isolation_problem(os.geteuid(), unshare, _base_python(), HARNESS)
    return problem, unshare or ""


def check_isolation_available() -> None:
    """Raise SandboxUnavailable, saying what is missing, unless an isolated run works here."""
    problem, _ = _preconditions()
    if problem is not None:
        raise SandboxUnavailable(problem)
    probe = run_tests_in_sandbox(SandboxJob(program="x = 1", tests=("assert x == 1",)))
    if probe.passed != (True,):
        raise SandboxUnavailable(f"the sandbox probe did not pass: {probe}")


@contextlib.contextmanager
def _reserved_uid() -> Iterator[int]:
    """Hold an exclusive flock on a per-uid lock file, across threads and processes."""
    lock_dir = Path(tempfile.gettempdir()) / "orchestry-sandbox-uids"
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    for slot in range(SANDBOX_UID_SLOTS):
        fd = os.open(lock_dir / str(slot), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield SANDBOX_UID_BASE + slot
        finally:
            os.close(fd)
        return
    raise SandboxUnavailable(f"all {SANDBOX_UID_SLOTS} sandbox uids are in use; lower the workers")


# --- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Record:
    kind: str
    index: int
    message: str


def _parse_record(raw: bytes, nonce: bytes) -> _Record | None:
    parts = raw.split(b" ", 3)
    if len(parts) != 4 or not secrets.compare_digest(parts[0], nonce):
        return None
    try:
        message = bytes.fromhex(parts[3].decode("ascii")).decode("utf-8", "replace")
        return _Record(parts[1].decode("ascii"), int(parts[2]), message)
    except ValueError:
        return None


def _collect(
    proc: subprocess.Popen[bytes],
    results: socket.socket,
    nonce: bytes,
    limits: SandboxLimits,
    max_records: int,
) -> tuple[list[_Record], str, bool]:
    """Read records and capped output until the namespace is gone; kill it past the deadline."""
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    cap = limits.max_output_kb * 1024
    output = bytearray()
    discarded = False
    records: list[_Record] = []
    killed = False
    deadline = time.monotonic() + limits.timeout_s + _START_GRACE_S
    with selectors.DefaultSelector() as sel:
        sel.register(out_fd, selectors.EVENT_READ)
        sel.register(results, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if killed:
                    break
                proc.kill()  # --kill-child: pid 1 of the namespace dies, and with it every process
                killed = True
                deadline = time.monotonic() + _DRAIN_S
                continue
            for key, _ in sel.select(remaining):
                if key.fileobj is results:
                    raw = results.recv(_RECORD_MAX)
                    if not raw:
                        sel.unregister(results)
                    elif len(records) < max_records and (rec := _parse_record(raw, nonce)):
                        records.append(rec)
                else:
                    chunk = os.read(out_fd, 65536)
                    if not chunk:
                        sel.unregister(out_fd)
                    else:
                        room = cap - len(output)
                        output += chunk[: max(room, 0)]
                        discarded = discarded or len(chunk) > room
    proc.wait()
    text = output.decode("utf-8", "replace")
    if discarded:
        text += f"\n[output beyond {limits.max_output_kb} KB discarded]"
    return records, text, killed


def _exit_text(status: str) -> str:
    """'signal 11' -> 'killed by SIGSEGV'; 'exit code 0' unchanged."""
    if status.startswith("signal "):
        number = int(status.removeprefix("signal "))
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return status


def _not_run_reason(records: list[_Record], killed: bool) -> str:
    kinds = {r.kind: r for r in records}
    if "S" in kinds:
        return "no result (the program has a syntax error)"
    if "L" in kinds:
        return "no result (the program failed to load)"
    if "T" in kinds or killed:
        return "no result (timed out)"
    if "X" in kinds and kinds["X"].message == f"signal {signal.SIGXCPU}":
        return "no result (CPU time limit exceeded)"
    if "X" in kinds and "C" not in kinds:
        return f"no result (the program's process ended early: {_exit_text(kinds['X'].message)})"
    return "no result (none was reported)"


def _report_from_records(
    n_tests: int, records: list[_Record], output: str, killed: bool
) -> TestReport:
    """Turn the harness's records into a TestReport; raise if isolation never came up."""
    errors = [r.message for r in records if r.kind == "E"]
    if errors:
        raise SandboxUnavailable(f"sandbox isolation failed: {errors[0]}; output: {output[:2000]}")
    if not any(r.kind == "R" for r in records):
        why = "was killed before it got ready" if killed else "exited before it got ready"
        raise SandboxUnavailable(f"the sandbox {why}; output: {output[:2000]}")
    outcome: list[bool | None] = [None] * n_tests
    failures: dict[int, str] = {}
    for r in records:
        if r.kind in ("P", "F") and 1 <= r.index <= n_tests:
            # A forked copy of the harness may report a test twice: any failure wins.
            ok = r.kind == "P" and outcome[r.index - 1] is not False
            outcome[r.index - 1] = ok
            if r.kind == "F" and r.index not in failures:
                failures[r.index] = r.message
    timed_out = killed or any(
        r.kind == "T" or (r.kind == "X" and r.message == f"signal {signal.SIGXCPU}")
        for r in records
    )
    syntax = next((r.message for r in records if r.kind == "S"), None)
    load = next((r.message for r in records if r.kind == "L"), None)
    first_failure = None
    for i, ok in enumerate(outcome, 1):
        if not ok:
            reason = failures.get(i) or _not_run_reason(records, killed)
            first_failure = f"test {i}: {reason}"
            break
    return TestReport(
        passed=tuple(bool(ok) for ok in outcome),
        first_failure=first_failure,
        syntax_error=syntax,
        load_error=load,
        timed_out=timed_out,
        output=output,
    )


def _sandbox_command(unshare: str, python: str) -> list[str]:
    """unshare's child is pid 1 of the new namespaces; the base interpreter runs the harness.

    -S -s -P: no site, no user site, no script directory on sys.path. Not -E/-I: the environment
    is exactly _CHILD_ENV, and its PYTHONHASHSEED makes set and dict-of-str order reproducible.
    -u: output written before a kill still reaches the parent. -B: the filesystem is read-only.
    """
    namespaces = ["--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    return [unshare, *namespaces, python, "-S", "-s", "-P", "-u", "-B", str(HARNESS)]


def run_tests_in_sandbox(job: SandboxJob, limits: SandboxLimits = SandboxLimits()) -> TestReport:
    """Run `job.program`, then `job.setup`, then each test in a fresh isolated process."""
    problem, unshare = _preconditions()
    if problem is not None:
        raise SandboxUnavailable(problem)
    tests = []
    for i, test in enumerate(job.tests, 1):
        try:
            tests.append(harden_snippet(test))
        except SyntaxError as exc:
            raise ValueError(f"test {i} of the job is not valid Python: {exc}") from exc
    try:
        setup = harden_snippet(job.setup)
    except SyntaxError as exc:
        raise ValueError(f"the job's setup is not valid Python: {exc}") from exc

    python = _base_python()
    keep = sorted(
        {
            os.path.realpath(sys.base_prefix),
            os.path.realpath(sys.base_exec_prefix),
            str(Path(python).parent.parent),
        }
    )
    nonce = secrets.token_hex(16)
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent_end, child_end, _reserved_uid() as uid:
        payload = marshal.dumps(
            {
                "nonce": nonce,
                "result_fd": child_end.fileno(),
                "program": job.program,
                "setup": setup,
                "tests": tests,
                "entry_point": job.entry_point,
                "uid": uid,
                "hidden": [os.path.realpath(p) for p in limits.hidden_paths],
                "keep": keep,
                "tmp_mb": 4 * limits.max_file_mb,
                "timeout_s": float(limits.timeout_s),
                "limits": {
                    "cpu_s": limits.cpu_s,
                    "memory_mb": limits.memory_mb,
                    "max_processes": limits.max_processes,
                    "max_file_mb": limits.max_file_mb,
                },
            }
        )
        try:
            proc = subprocess.Popen(
                _sandbox_command(unshare, python),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(child_end.fileno(),),
                env=_CHILD_ENV,
                cwd="/",
                start_new_session=True,
            )
        finally:
            child_end.close()
        with proc:
            assert proc.stdin is not None
            try:
                proc.stdin.write(payload)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the child died at start; its output says why and no "R" record came
            records, output, killed = _collect(
                proc, parent_end, nonce.encode(), limits, max_records=4 * len(tests) + 16
            )
    return _report_from_records(len(tests), records, output, killed)


def run_many(jobs: Sequence[SandboxJob], limits: SandboxLimits, workers: int) -> list[TestReport]:
    """Run jobs with at most `workers` sandboxes at a time; reports come back in job order."""
    if workers < 1:
        raise ValueError(f"run_many: workers must be at least 1, got {workers}")
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(lambda job: run_tests_in_sandbox(job, limits), jobs))
