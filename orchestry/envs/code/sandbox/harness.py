"""Child side of `orchestry.envs.code.sandbox.runner`: pid 1 of fresh pid, mount and net namespaces.

The parent starts it as ``unshare --net --mount --pid --fork --kill-child --mount-proc
<base python> -S -s -P -u -B harness.py`` with the job (a marshal'd dict) on stdin and
a SOCK_SEQPACKET result socket passed as an extra fd. It uses the standard library only: it runs
on the base interpreter, never on the project's virtual environment (inside the hidden repository).

1. As root, still trusted: read the job, run the strict operators' source it carries, hide the
   repository and the other secret places under empty tmpfs mounts (binding the interpreter back
   where it lived under one of them), give the sandbox a private size-capped tmpfs on /tmp and
   /dev/shm, and remount the root filesystem read-only and nosuid. All of this happens in this mount
   namespace only.
2. Fork the worker. It sets the rlimits, forbids new privileges, drops to the job's unprivileged uid
   and gid, compiles everything, then runs the program, the setup and each test, sending one record
   per outcome on the result socket.
3. Pid 1 stays root, waits for the worker under the wall-clock deadline, reports a timeout or how
   the worker ended, and exits; the kernel then kills every process left in the pid namespace.

Everything the worker needs after untrusted code has started (exec, the socket fd, the nonce, the
strict comparison helpers, the builtins it calls) is bound to locals and closures before that code
runs, so patching ``builtins``, ``os`` or ``sys`` from the program cannot change the harness.

Why the strict operators (`strict_operators.py`, the functions hardened tests call in place of ==,
<, truth tests and arithmetic) are a separate file whose *source* the parent sends in the job,
rather than a module this script imports: ``-P -s -S`` keep this script's directory, and so the
package, off sys.path on purpose, and that directory is inside the repository, which step 1 hides.
An import would need the repository on sys.path and could resolve at any later time, after the
hiding or after untrusted code ran. The text instead arrives on stdin with the rest of the trusted
job, read by the parent from next to this script, and `load_strict_operators` runs it before
anything is hidden or forked: no part of the package is looked up in the filesystem, and every
function the worker uses is bound before untrusted code starts, as when it all lived here.
"""

from __future__ import annotations

import builtins
import ctypes
import marshal
import os
import resource
import select
import sys
import time

# Every program pays this module's imports, so nothing heavy at run time (typing, signal's enums).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Send = Callable[[bytes, int, bytes], None]
    Describe = Callable[[BaseException], bytes]

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
PR_SET_NO_NEW_PRIVS = 38


class IsolationError(Exception):
    """A namespace, mount or privilege step failed: the untrusted code must not run."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    return libc


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    fstype: str | None,
    flags: int,
    data: str | None,
) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise IsolationError(f"mount {fstype or source} on {target}: {os.strerror(err)}")


def _is_under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def isolate_filesystem(hidden: list[str], keep: list[str], uid: int, tmp_mb: int) -> None:
    """Hide `hidden` under empty tmpfs, keep `keep` visible read-only, private /tmp, read-only /."""
    libc = _libc()
    kept_fds = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
    covers = [(path, "size=1m,mode=0755", MS_NOSUID | MS_NODEV | MS_NOEXEC) for path in hidden]
    covers.append(("/tmp", f"size={tmp_mb}m,mode=0700,uid={uid},gid={uid}", MS_NOSUID | MS_NODEV))
    covers.append(("/dev/shm", f"size={tmp_mb}m,mode=1777", MS_NOSUID | MS_NODEV))
    for target, options, flags in covers:
        if not os.path.isdir(target):
            continue
        _mount(libc, "tmpfs", target, "tmpfs", flags, options)
        for path, fd in kept_fds.items():
            if _is_under(path, target):
                os.makedirs(path, exist_ok=True)
                _mount(libc, f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
                ro_bind = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
                _mount(libc, None, path, None, ro_bind, None)
    for fd in kept_fds.values():
        os.close(fd)
    # MS_BIND makes this a per-mount flag change in this namespace, never the host's superblock.
    _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)


def make_sender(fd: int, nonce: bytes) -> Send:
    """One record per write on the SEQPACKET socket: `nonce kind index hex(message)`."""
    _write = os.write
    _hex = bytes.hex

    def send(kind: bytes, index: int, message: bytes) -> None:
        _write(fd, nonce + b" " + kind + b" " + (b"%d" % index) + b" " + _hex(message).encode())

    return send


def make_describer() -> Describe:
    """`describe(exc) -> bytes`: 'TypeName: message', robust to hostile __str__ and metaclasses."""
    _type = type
    _type_name = type.__dict__["__name__"].__get__
    _str = str
    _encode = str.encode
    _base_exception = BaseException

    def describe(exc: BaseException) -> bytes:
        name = _encode(_type_name(_type(exc)), "utf-8", "replace")[:200]
        try:
            text = _encode(_str(exc), "utf-8", "replace")[:500]
        except _base_exception:
            text = b"<exception message could not be formatted>"
        return name + b": " + text if text else name

    return describe


def load_strict_operators(source: str) -> Callable[[], dict[str, Callable[..., object]]]:
    """Run strict_operators.py's source (sent by the parent) and return its make_strict_helpers.

    A namespace of its own, as an imported module would have; its filename is not a path, so a
    traceback never reads a file from the sandbox's /tmp. Called as root, before isolation.
    """
    namespace: dict[str, object] = {"__name__": "strict_operators"}
    exec(compile(source, "<strict_operators>", "exec", dont_inherit=True), namespace)
    return namespace["make_strict_helpers"]


def run_tests(
    job: dict[str, object],
    send: Send,
    describe: Describe,
    helpers: dict[str, Callable[..., object]],
) -> None:
    """Compile and run the program, the setup and each test; one record per outcome."""
    _compile = compile
    _exec = exec
    _dict = dict
    _enumerate = enumerate
    _base_exception = BaseException
    _encode = str.encode
    _modules = sys.modules
    pristine_builtins = _dict(vars(builtins))
    module_type = type(sys)

    try:
        program = _compile(job["program"], "<program>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        send(b"S", 0, _encode(f"line {exc.lineno}: {exc.msg}", "utf-8", "replace"))
        return
    except (ValueError, MemoryError, RecursionError) as exc:
        send(b"S", 0, describe(exc))
        return
    setup = _compile(job["setup"], "<setup>", "exec", dont_inherit=True)
    tests = [
        _compile(t, f"<test {i}>", "exec", dont_inherit=True)
        for i, t in _enumerate(job["tests"], 1)
    ]
    entry_point = job["entry_point"]

    # The program gets a module of its own, registered as __main__ so `import __main__` cannot
    # reach the harness; its name is not "__main__", so an `if __name__ == "__main__":` demo
    # block (often reading input()) does not run, as in the usual HumanEval-style harnesses.
    solution = module_type("__solution__")
    program_ns = solution.__dict__
    program_ns["__builtins__"] = _dict(pristine_builtins)
    _modules["__main__"] = solution
    try:
        _exec(program, program_ns)
    except _base_exception as exc:
        send(b"L", 0, describe(exc))
        return

    base_ns = _dict(program_ns)
    if entry_point is not None:
        if entry_point not in program_ns:
            missing = f"NameError: entry point {entry_point!r} is not defined"
            send(b"L", 0, _encode(missing, "utf-8", "replace"))
            return
        base_ns["candidate"] = program_ns[entry_point]
    # Setup and tests live in namespaces the program's functions do not hold (their globals are
    # program_ns), so `globals()` inside the program cannot replace the helpers.
    base_ns["__name__"] = "__tests__"
    base_ns["__builtins__"] = _dict(pristine_builtins)
    base_ns.update(helpers)
    try:
        _exec(setup, base_ns)
    except _base_exception as exc:
        send(b"L", 0, b"setup: " + describe(exc))
        return

    for index, test in _enumerate(tests, 1):
        test_ns = _dict(base_ns)
        test_ns["__builtins__"] = _dict(pristine_builtins)
        test_ns.update(helpers)
        try:
            _exec(test, test_ns)
        except _base_exception as exc:
            send(b"F", index, describe(exc))
        else:
            send(b"P", index, b"")
    send(b"C", 0, b"")


def drop_privileges(job: dict[str, object]) -> None:
    """In the forked worker, before any untrusted code: rlimits, no new privileges, uid/gid drop."""
    mb = 1024 * 1024
    limits = job["limits"]
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb, limits["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb,) * 2)
    # RLIMIT_NPROC counts every process of the real uid and never binds root: hence the drop below,
    # to a uid the parent reserved for this sandbox alone.
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"],) * 2)
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise IsolationError("prctl(PR_SET_NO_NEW_PRIVS) failed")
    uid = job["uid"]
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != uid:
        raise IsolationError("privilege drop did not take")
    os.chdir("/tmp")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def describe_status(status: int) -> bytes:
    """'exit code N' or 'signal N' (the parent names the signal)."""
    if os.WIFSIGNALED(status):
        return b"signal %d" % os.WTERMSIG(status)
    return b"exit code %d" % os.waitstatus_to_exitcode(status)


def supervise(worker: int, send: Send, timeout_s: float) -> None:
    """As pid 1: wait for the worker to end or the deadline to pass, and say which.

    Orphans of the program are re-parented to pid 1; reaping them as they end keeps their zombies
    from counting against the sandbox uid's RLIMIT_NPROC.
    """
    try:
        pidfd = os.pidfd_open(worker)
    except OSError as exc:
        send(b"E", 0, f"pidfd_open (Linux >= 5.3 needed): {exc}".encode())
        return
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        select.select([pidfd], [], [], min(remaining, 0.1))
        while (ended := os.waitpid(-1, os.WNOHANG))[0] != 0:
            if ended[0] == worker:
                send(b"X", 0, describe_status(ended[1]))
                return
    send(b"T", 0, b"")


def main() -> None:
    _exit = os._exit
    job = marshal.loads(sys.stdin.buffer.read())
    send = make_sender(job.pop("result_fd"), job.pop("nonce").encode())
    describe = make_describer()
    make_strict_helpers = load_strict_operators(job.pop("strict_operators"))
    try:
        isolate_filesystem(job["hidden"], job["keep"], job["uid"], job["tmp_mb"])
    except (IsolationError, OSError) as exc:
        send(b"E", 0, describe(exc))
        os._exit(1)
    send(b"R", 0, b"")
    worker = os.fork()
    if worker == 0:
        try:
            drop_privileges(job)
        except (IsolationError, OSError) as exc:
            send(b"E", 0, describe(exc))
            _exit(1)
        # From here on untrusted code runs: whatever escapes run_tests (a BaseException from a
        # signal handler the program installed, a closed result socket) just ends the worker.
        try:
            run_tests(job, send, describe, make_strict_helpers())
        finally:
            _exit(0)
    supervise(worker, send, job["timeout_s"])
    _exit(0)


if __name__ == "__main__":
    main()
