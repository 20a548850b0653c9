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

The tests never run where the program runs. The harness (pid 1, root) forks two processes under two
uids reserved for this run: the *worker* (`worker.py`) runs the program and then only answers calls;
the *checker* (`checker.py`) runs the setup and each test with `candidate`, and any other program
function a test names (such as `aux` for aux's own tests), bound to a proxy that sends the arguments
as plain values over a socket and gets back a plain value or an exception to raise (`wire.py`
decodes exact builtin types only). Every comparison, assert and truth test happens in the checker.
The worker is forked before the tests are even read, keeps no fd but stdout, stderr and its end of
the call channel, and cannot signal, trace or read the checker (another uid): walking frames or
`gc`, writing memory through ctypes, audit hooks, tracing, threads left running, forged messages
on the channel or on any fd can change nothing but the values the program returns.

Results come back on a dedicated SOCK_SEQPACKET socket that only the checker holds, one record per
outcome, each tagged with a random per-run nonce; stdout and stderr are only captured (capped) for
feedback, so printing "PASSED", exiting early (`sys.exit(0)`, `os._exit(0)`, `SystemExit`,
`KeyboardInterrupt`) or writing junk to any fd never counts as a pass: a test passes only when the
checker says so.

Always-equal objects: a value that is not plain cannot cross the channel (the call fails with
UntrustedValue). `harden_snippet` still rewrites every test and the setup before they run: each
comparison (``==, !=, <, <=, >, >=, in, not in, is, is not``), each truth test (assert, if, while,
``not``, ``and``/``or``, conditional expressions, comprehension filters) and each arithmetic
operator goes through a helper that accepts only values whose exact type is a builtin value type
(int, float, bool, complex, str, bytes, None, range, the builtin classes themselves, and
list/tuple/dict/set/frozenset of those, checked recursively by type identity) and raises otherwise.
Builtin values keep Python's semantics, so ``assert abs(candidate(x) - 0.5) < 1e-6`` works as
usual. A test whose intended answer is an instance of a class (even one defined in the setup)
cannot pass.

What a test sees of the program: the functions and plain values of the program's globals that the
setup and the tests name (builtin names excluded: a program cannot shadow `sorted` in the tests),
and the standard-library modules bound to such names. A program function that returns a function
hands back another proxy; one that returns anything else that is not plain (a generator, an
instance) fails the test.

Modules, parent side first: `job` (SandboxJob, SandboxLimits, TestReport, SandboxUnavailable),
`isolation` (preconditions on this host, two uids per run), `hardening` (the AST rewrite of tests
and setup), `records` (collecting the checker's records and output into a TestReport) and `runner`
(`run_tests_in_sandbox`, `run_many`, `check_isolation_available`). Child side, standard library
only, nothing imported from the package inside the sandbox (the parent compiles these files and
sends their code in the job): `harness.py` (the script the sandbox runs), `worker.py`, `checker.py`,
`wire.py` (the call channel) and `strict_operators.py` (the strict comparisons).
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
