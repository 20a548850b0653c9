"""Child side of `orchestry.envs.code.sandbox.runner`: pid 1 of fresh pid, mount and net namespaces.

The parent starts it as ``unshare --net --mount --pid --fork --kill-child --mount-proc
<base python> -S -s -P -u -B harness.py`` with the job on stdin in two parts (each an 8-byte length
and a marshal'd dict) and a SOCK_SEQPACKET result socket passed as an extra fd. It uses the standard
library only: it runs on the base interpreter, never on the project's virtual environment (inside
the hidden repository).

1. As root, still trusted: read the first part (the program, the limits, and the child-side
   modules wire, worker, checker and strict_operators, compiled by the parent), run those modules, hide the repository and the other secret places under empty tmpfs
   mounts (binding the interpreter back where it lived under one of them), give the sandbox a
   private size-capped tmpfs on /tmp and /dev/shm, and remount the root filesystem read-only and
   nosuid. All of this happens in this mount namespace only.
2. Fork the worker (worker.py) *before reading the second part*: it closes every fd but stdout,
   stderr and its end of a call channel, sets the rlimits, forbids new privileges, drops to its own
   unprivileged uid, runs the program and then only answers calls. The tests, their expected
   values, the result socket and the nonce never exist in its memory.
3. Read the second part (the nonce, the hardened setup and tests) and fork the checker (checker.py) under a second uid: it runs the setup and
   each test with the program's functions bound to proxies, and sends one record per outcome on the
   result socket. Different uids: the worker can neither signal, trace nor read the checker.
4. Pid 1 stays root, waits for the checker under the wall-clock deadline, reports a timeout or how
   the worker ended, and exits; the kernel then kills every process left in the pid namespace.

Why the child-side modules (wire, worker, checker, strict_operators) are files whose code the
parent compiles and sends in the job, rather than modules this script imports: ``-P -s -S`` keep this script's
directory, and so the package, off sys.path on purpose, and that directory is inside the repository,
which step 1 hides. An import would need the repository on sys.path and could resolve at any later
time, after the hiding or after untrusted code ran. The code instead arrives on stdin with the rest
of the trusted job, compiled by the parent from the files next to this script (the same interpreter
runs both sides), and `load_source` runs it: no part of the package is looked up in the filesystem.
"""

from __future__ import annotations

import builtins
import ctypes
import marshal
import os
import resource
import select
import socket
import time

# Every program pays this module's imports, so nothing heavy at run time (typing, signal's enums).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Send = Callable[[bytes, int, bytes], None]
    Describe = Callable[[BaseException], bytes]

SIGXCPU = 24
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


def load_source(code: bytes, name: str, namespace: dict[str, object]) -> dict[str, object]:
    """Run a child-side module (compiled by the parent, marshal'd) in `namespace`, and return it.

    Its filename is not a path, so a traceback never reads a file from the sandbox's /tmp. Called
    as root, before isolation and before any untrusted code.
    """
    namespace["__name__"] = name
    # A builtins of its own: a program that patches the `builtins` module in the worker cannot
    # reach the names these modules use.
    namespace["__builtins__"] = dict(vars(builtins))
    exec(marshal.loads(code), namespace)
    return namespace


def read_part(fd: int) -> dict[str, object]:
    """One part of the job: an 8-byte length and a marshal'd dict, read unbuffered from `fd`.

    Unbuffered, so that nothing of the next part (the tests) is read ahead into this process before
    the program's process is forked from it.
    """

    def exactly(n: int) -> bytes:
        chunks = []
        while n:
            chunk = os.read(fd, min(n, 1 << 20))
            if not chunk:
                raise EOFError("the job ended early")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    return marshal.loads(exactly(int.from_bytes(exactly(8), "big")))


def drop_privileges(limits: dict[str, int], uid: int, workdir: str) -> None:
    """In a forked child, before any untrusted code: rlimits, no new privileges, uid/gid drop."""
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_mb"] * mb, limits["memory_mb"] * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb,) * 2)
    # RLIMIT_NPROC counts every process of the real uid and never binds root: hence the drop below,
    # to a uid the parent reserved for this sandbox alone.
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["max_processes"],) * 2)
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise IsolationError("prctl(PR_SET_NO_NEW_PRIVS) failed")
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getegid() != uid:
        raise IsolationError("privilege drop did not take")
    os.chdir(workdir)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def describe_status(status: int) -> bytes:
    """'exit code N' or 'signal N' (the parent names the signal)."""
    if os.WIFSIGNALED(status):
        return b"signal %d" % os.WTERMSIG(status)
    return b"exit code %d" % os.waitstatus_to_exitcode(status)


def reap() -> list[tuple[int, int, float]]:
    """(pid, status, CPU seconds) of every child that has ended since the last call, no waiting."""
    ended = []
    try:
        while (child := os.wait4(-1, os.WNOHANG))[0] != 0:
            pid, status, usage = child
            ended.append((pid, status, usage.ru_utime + usage.ru_stime))
    except ChildProcessError:
        pass  # no children left
    return ended


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc (this namespace's own); -1 if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return -1.0
    # Fields after the command name (which may hold spaces and parentheses): utime and stime are
    # the 12th and 13th, in clock ticks.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def supervise(worker: int, checker: int, send: Send, timeout_s: float) -> None:
    """As pid 1: wait for the checker or the deadline, say how the worker ended and its CPU time.

    The last record is always ``U``: the CPU seconds the program's process used (``-1`` when
    unknown), so a caller can see how close a program came to `cpu_s` (a score decided near that
    limit can differ between runs of the same program).

    The checker exits 0 when the run ended normally: pid 1 then exits and the kernel kills the
    worker. It exits 3 when the worker went away mid-run; pid 1 then reports the worker's end as
    ``X`` (an exit code or a signal such as SIGXCPU), as the parent expects. Orphans of the program
    are re-parented to pid 1; reaping them as they end keeps their zombies from counting against
    the sandbox uid's RLIMIT_NPROC.
    """
    worker_cpu: list[float] = []
    _supervise(worker, checker, send, timeout_s, worker_cpu)
    cpu = worker_cpu[0] if worker_cpu else cpu_seconds(worker)
    send(b"U", 0, b"%.3f" % cpu)


def _supervise(
    worker: int, checker: int, send: Send, timeout_s: float, worker_cpu: list[float]
) -> None:
    try:
        pidfd = os.pidfd_open(checker)
    except OSError as exc:
        send(b"E", 0, f"pidfd_open (Linux >= 5.3 needed): {exc}".encode())
        return
    deadline = time.monotonic() + timeout_s
    worker_status: int | None = None
    checker_status: int | None = None
    while (remaining := deadline - time.monotonic()) > 0:
        select.select([pidfd], [], [], min(remaining, 0.1))
        for pid, status, cpu in reap():
            if pid == worker:
                worker_status = status
                worker_cpu.append(cpu)
            elif pid == checker:
                checker_status = status
        if checker_status is None:
            continue
        if not os.WIFEXITED(checker_status) or os.WEXITSTATUS(checker_status) not in (0, 3):
            # The checker's own CPU limit reads as the run's (a timeout); anything else is named.
            status = describe_status(checker_status)
            send(b"X", 0, status if status == b"signal %d" % SIGXCPU else b"checker " + status)
            return
        if os.WEXITSTATUS(checker_status) == 0:
            return
        if worker_status is not None:
            send(b"X", 0, describe_status(worker_status))
            return
    send(b"T", 0, b"")


def start_worker(
    part: dict[str, object], wire: dict[str, object], worker: dict[str, object], call_fd: int
) -> int:
    """Fork the process that runs the program; it keeps only stdout, stderr and `call_fd`."""
    pid = os.fork()
    if pid != 0:
        return pid
    _exit = os._exit
    try:
        os.closerange(3, call_fd)
        os.closerange(call_fd + 1, 65536)
        drop_privileges(part["limits"], part["worker_uid"], "/tmp")
    except (IsolationError, OSError) as exc:
        wire["send_reply"](call_fd, ["error", make_describer()(exc).decode("utf-8", "replace")])
        _exit(1)
    try:
        wire["send_reply"](call_fd, ["ready"])
        # From here on untrusted code runs: whatever escapes serve just ends the worker.
        worker["serve"](call_fd, part["program"])
    finally:
        _exit(0)


def start_checker(
    part: dict[str, object], checker: dict[str, object], call_fd: int, send: Send
) -> int:
    """Fork the trusted process that runs the setup and the tests against the worker's answers."""
    pid = os.fork()
    if pid != 0:
        return pid
    _exit = os._exit
    code = 1
    try:
        drop_privileges(part["limits"], part["checker_uid"], "/")
        helpers = checker["make_strict_helpers"]()
        code = checker["run_checks"](call_fd, part, send, make_describer(), helpers)
    except (IsolationError, OSError) as exc:
        send(b"E", 0, make_describer()(exc))
    finally:
        _exit(code)


def main() -> None:
    """Read the program's part of the job, isolate, fork the worker; then the tests' part."""
    _exit = os._exit
    first = read_part(0)
    # Every child-side module is compiled here, as root, before anything is hidden or forked.
    wire = load_source(first.pop("wire"), "wire", {})
    worker = load_source(first.pop("worker"), "worker", dict(wire))
    checker = load_source(first.pop("checker"), "checker", dict(wire))
    strict = load_source(first.pop("strict_operators"), "strict_operators", {})
    checker["make_strict_helpers"] = strict["make_strict_helpers"]
    problem = None
    try:
        isolate_filesystem(first["hidden"], first["keep"], first["worker_uid"], first["tmp_mb"])
    except (IsolationError, OSError) as exc:
        problem = exc
    checker_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    worker_pid = None
    if problem is None:
        worker_pid = start_worker(first, wire, worker, worker_end.fileno())
    worker_end.close()
    first.pop("program")
    second = read_part(0)
    send = make_sender(first["result_fd"], second.pop("nonce").encode())
    if problem is not None:
        send(b"E", 0, make_describer()(problem))
        _exit(1)
    send(b"R", 0, b"")
    second.update(limits=first["limits"], checker_uid=first["checker_uid"])
    checker_pid = start_checker(second, checker, checker_end.fileno(), send)
    checker_end.close()
    supervise(worker_pid, checker_pid, send, first["timeout_s"])
    _exit(0)


if __name__ == "__main__":
    main()
