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

Modules, parent side first: `job` (SandboxJob, SandboxLimits, TestReport, SandboxUnavailable),
`isolation` (preconditions on this host, one uid per run), `hardening` (the AST rewrite of tests
and setup), `records` (collecting the child's records and output into a TestReport) and `runner`
(`run_tests_in_sandbox`, `run_many`, `check_isolation_available`). Child side, standard library
only, nothing imported from the package inside the sandbox: `harness.py` (the script the sandbox
runs) and `strict_operators.py` (its strict comparisons, whose source the parent sends in the job).
"""

from orchestry.envs.code.sandbox.hardening import harden_snippet
from orchestry.envs.code.sandbox.job import (
    SandboxJob,
    SandboxLimits,
    SandboxUnavailable,
    TestReport,
    default_hidden_paths,
)
from orchestry.envs.code.sandbox.runner import (
    check_isolation_available,
    run_many,
    run_tests_in_sandbox,
)

__all__ = [
    "SandboxJob",
    "SandboxLimits",
    "SandboxUnavailable",
    "TestReport",
    "check_isolation_available",
    "default_hidden_paths",
    "harden_snippet",
    "run_many",
    "run_tests_in_sandbox",
]
