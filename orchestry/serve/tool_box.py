"""The team's own tools (`env.tools`: python, calculator, examples) run for the server in a box: a
child process in a mount namespace of its own whose root holds nothing of the host but what the
project's sandbox needs to start (docs/serving.md, "Server-side tools").

The sandbox (`envs/code/sandbox`) already runs the code without network, as an unprivileged uid,
with the checkout, the venv and the home directory hidden; it still sees the rest of the host's
filesystem (/etc, other checkouts of the project). For requests from strangers the server wraps it
once more: `python -m orchestry.serve.tool_box` reads one call on stdin, imports everything it will
run, then

1. leaves the host's mount namespace (`unshare(CLONE_NEWNS)`, every mount private);
2. builds a new root on a tmpfs of its own: read-only bind mounts of the system's programs and
   libraries (/usr/bin, /usr/lib, /usr/lib64 and the /bin, /lib, /lib64, /sbin links), the base
   Python install, the sandbox's child-side files and `/etc/ld.so.cache`; the character devices
   null, zero, random and urandom; an empty /proc, /tmp and /dev/shm; and the sandbox's uid locks
   (so boxes and other sandboxes on the host never share a uid). No /etc, no /home, no /root, no
   /work: no host file outside these;
3. moves into it (`pivot_root`), detaches the host's root, checks that /etc/passwd is gone, and
   runs the call through `ToolUse.call`, which starts the sandbox inside the box.

`run_in_box` is the server's side: one box per call, killed with its process group when it runs
past its time. `check_box` runs a probe at start: the server refuses `--server-tools` when it fails.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestry.envs.code.sandbox import SandboxLimits
from orchestry.envs.code.sandbox import isolation as sandbox_isolation
from orchestry.envs.code.user_task import task_from_message
from orchestry.envs.tools.protocol import ToolBudget, ToolCall
from orchestry.envs.tools.registry import ToolUse

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
"""pivot_root's syscall number (glibc has no wrapper) on the machines the project runs on."""
SYSTEM_DIRS = ("/usr/bin", "/usr/lib", "/usr/lib64")
ROOT_LINKS = ("/bin", "/lib", "/lib64", "/sbin")
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
STARTUP_S = 20.0
"""What a box may take beyond the sandbox's own wall clock: the interpreter, imports, mounts."""


class BoxUnavailable(RuntimeError):
    """The box cannot be built or did not work here; no tool may run."""


@dataclass(frozen=True)
class BoxCall:
    """One tool call for the box: the tools the env turns on, the task, the agent's draft."""

    names: tuple[str, ...]
    max_calls: int
    max_result_chars: int
    limits: dict[str, Any]
    """The sandbox's limits (SandboxLimits' fields; its hidden paths are the box's defaults)."""
    task_message: str
    """The user's message the task was read from (`envs/code/user_task.task_from_message`)."""
    helpers: int
    draft: str
    tool: str
    argument: str

    @classmethod
    def of(
        cls,
        tool_use: ToolUse,
        task_message: str,
        helpers: int,
        draft: str,
        call: ToolCall,
    ) -> BoxCall:
        limits = {k: v for k, v in asdict(tool_use.limits).items() if k != "hidden_paths"}
        budget = tool_use.budget
        return cls(
            tool_use.names,
            budget.max_calls,
            budget.max_result_chars,
            limits,
            task_message,
            helpers,
            draft,
            call.name,
            call.argument,
        )


def run_in_box(call: BoxCall, timeout_s: float | None = None) -> str:
    """The tool's result, run in a fresh box (module doc); a box that runs past `timeout_s`
    (default: the sandbox's wall clock + STARTUP_S) is killed with everything it started, and
    the result says so. Raises BoxUnavailable when the box could not run the call."""
    limit = timeout_s or float(call.limits["timeout_s"]) + STARTUP_S
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestry.serve.tool_box"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd="/",
        start_new_session=True,  # its own process group: a timeout kills all of it
    )
    try:
        out, err = proc.communicate(json.dumps(asdict(call)).encode(), timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"error: the tool ran past {limit:.0f} s and was stopped"
    if proc.returncode != 0:
        raise BoxUnavailable(
            f"the tool box exited {proc.returncode}: {err.decode(errors='replace')[-600:]}"
        )
    return json.loads(out)["result"]


def check_box() -> None:
    """Raise BoxUnavailable, saying why, unless a box runs a python call here and sees no host
    file (the server's start with --server-tools)."""
    if platform.machine() not in SYS_PIVOT_ROOT:
        raise BoxUnavailable(f"no pivot_root syscall number known for {platform.machine()}")
    problem, _ = sandbox_isolation.preconditions()
    if problem is not None:
        raise BoxUnavailable(problem)
    probe = "import os\nprint(6 * 7, os.path.exists('/etc/passwd'))"
    call = BoxCall(("python",), 1, 200, _PROBE_LIMITS, _PROBE_TASK, 1, "", "python", probe)
    result = run_in_box(call)
    if result.strip() != "42 False":
        raise BoxUnavailable(f"the tool box's probe printed {result[:200]!r}, not '42 False'")


_PROBE_TASK = 'def probe() -> int:\n    """Return 42."""\n'
_PROBE_LIMITS = {
    "timeout_s": 10.0,
    "cpu_s": 5,
    "memory_mb": 256,
    "max_processes": 8,
    "max_file_mb": 1,
    "max_output_kb": 8,
}


# ---------------------------------------------------------------------------------- the box


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return libc


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise BoxUnavailable(f"{what}: {os.strerror(ctypes.get_errno())}")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fs: str | None, flags: int) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    _check(libc.mount(enc(source), enc(target), enc(fs), flags, None) == 0, f"mount {target}")


def _bind(
    libc: ctypes.CDLL, source: str, fd: int, root: str, flags: int = MS_NOSUID | MS_NODEV
) -> None:
    """`source` (held open as `fd`, so it is reached even where a later mount hides its path) at
    the same path under `root`, read-only."""
    target = root + source
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Path(target).touch()
    _mount(libc, f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    _mount(libc, None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)


def _sources() -> list[tuple[str, int]]:
    """What the box binds from the host, as (path, flags), in mounting order."""
    plain = MS_NOSUID | MS_NODEV
    found = [(p, plain) for p in SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    found += [(p, plain) for p in ROOT_LINKS if os.path.isdir(p) and not os.path.islink(p)]
    python = Path(sandbox_isolation.base_python())
    found += [
        (p, plain) for p in sorted({os.path.realpath(sys.base_prefix), str(python.parent.parent)})
    ]
    found.append((str(sandbox_isolation.HARNESS.parent), plain))  # the child-side files
    if os.path.isfile("/etc/ld.so.cache"):
        found.append(("/etc/ld.so.cache", plain))
    found += [(d, MS_NOSUID) for d in DEVICES if os.path.exists(d)]
    return found


def enter_private_root() -> None:
    """Steps 1-3 of the module doc: this process ends up in a root of its own."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS) == 0, "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    locks = Path("/tmp") / "orchestry-sandbox-uids"  # isolation.reserved_uids' folder
    locks.mkdir(mode=0o700, exist_ok=True)
    locks_fd = os.open(locks, os.O_PATH | os.O_DIRECTORY)
    # every source held open before /tmp is covered: a checkout or a Python under /tmp stays
    # reachable through its descriptor (a path would lead into the new, empty /tmp)
    sources = [(path, os.open(path, os.O_PATH), flags) for path, flags in _sources()]
    # the new root on a tmpfs over /tmp: in this namespace only, so nothing is left on the host
    _mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV)
    root = "/tmp/root"
    os.mkdir(root)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV)
    # the scratch space first, the one writable place (the sandbox mounts its own /tmp over it),
    # so that a source under /tmp is bound inside it rather than hidden by it
    os.makedirs(root + "/tmp")
    _mount(libc, "tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV)
    os.chmod(root + "/tmp", 0o1777)
    for path in ROOT_LINKS:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
    for path, fd, flags in sources:
        _bind(libc, path, fd, root, flags)
        os.close(fd)
    for path, mode in (("/proc", 0o555), ("/dev/shm", 0o1777)):
        os.makedirs(root + path, exist_ok=True)
        os.chmod(root + path, mode)
    os.makedirs(root + str(locks), mode=0o700)
    _mount(libc, f"/proc/self/fd/{locks_fd}", root + str(locks), None, MS_BIND)
    os.close(locks_fd)
    os.chdir(root)
    _check(libc.syscall(SYS_PIVOT_ROOT[platform.machine()], b".", b".") == 0, "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH) == 0, "detaching the host's root")
    os.chdir("/")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    checkout = sandbox_isolation.HARNESS.parents[4]
    if os.path.exists("/etc/passwd") or os.listdir(checkout) != ["orchestry"]:
        raise BoxUnavailable("the box still sees host files after pivot_root")


def run_call(call: BoxCall) -> str:
    """The tool's result (inside the box)."""
    tool_use = ToolUse(
        call.names, ToolBudget(call.max_calls, call.max_result_chars), SandboxLimits(**call.limits)
    )
    task = task_from_message(call.task_message, call.helpers)
    return tool_use.call(task, call.draft, ToolCall(call.tool, call.argument, 0))


def main() -> int:
    fields = json.loads(sys.stdin.buffer.read())
    call = BoxCall(**{**fields, "names": tuple(fields["names"])})
    enter_private_root()
    json.dump({"result": run_call(call)}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
