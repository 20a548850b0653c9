"""What a sandbox run needs from this host before anything runs, and the uid each run gets.

The parent checks these preconditions (root, `unshare`, the base interpreter, the child-side files)
once per process and refuses to run, with SandboxUnavailable saying what is missing, rather than
fall back to running untrusted code without isolation. Each run then reserves two uids of its own (the program's
and the checker's), so parallel sandboxes never share RLIMIT_NPROC counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from orchestry.envs.code.sandbox.job import SandboxUnavailable

# The child side: the script the base interpreter runs, and the modules whose source the parent
# sends it inside the job (see harness.py for why they are not imported).
HARNESS = Path(__file__).with_name("harness.py")
STRICT_OPERATORS = Path(__file__).with_name("strict_operators.py")
WIRE = Path(__file__).with_name("wire.py")
WORKER = Path(__file__).with_name("worker.py")
CHECKER = Path(__file__).with_name("checker.py")
CHILD_FILES = (HARNESS, STRICT_OPERATORS, WIRE, WORKER, CHECKER)
# Each run gets the first free pair of uids of this range (the program's and the checker's); these
# uids own no files on the host.
SANDBOX_UID_BASE = 1_900_000_000
SANDBOX_UID_SLOTS = 256


def base_python() -> str:
    """The interpreter the venv was made from: it needs nothing from the (hidden) repository."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def isolation_problem(
    euid: int, unshare: str | None, python: str, child_files: Sequence[Path]
) -> str | None:
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
    for path in child_files:
        if not path.is_file():
            return f"the sandbox harness {path} is missing"
    return None


@functools.lru_cache(maxsize=1)
def preconditions() -> tuple[str | None, str]:
    """(what is missing or None, the path of `unshare`), worked out once per process."""
    unshare = shutil.which("unshare")
    problem = isolation_problem(os.geteuid(), unshare, base_python(), CHILD_FILES)
    return problem, unshare or ""


@contextlib.contextmanager
def reserved_uids() -> Iterator[tuple[int, int]]:
    """(the program's uid, the checker's uid), held by a flock per slot across threads and processes."""
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
            yield SANDBOX_UID_BASE + 2 * slot, SANDBOX_UID_BASE + 2 * slot + 1
        finally:
            os.close(fd)
        return
    raise SandboxUnavailable(f"all {SANDBOX_UID_SLOTS} sandbox uids are in use; lower the workers")
