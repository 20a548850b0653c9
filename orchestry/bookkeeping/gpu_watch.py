"""Peak GPU memory of running processes, as `nvidia-smi` sees it (CUDA context and kernels included,
which no allocator's statistics count): what the experiment runner records per stage and the GPU
check per command. Without `nvidia-smi` (a CPU machine) it records nothing."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
EVERY_S = 1.0
"""Seconds between two looks (one `nvidia-smi` call takes ~50 ms)."""


def used_by_pid() -> dict[int, int]:
    """MiB of GPU memory each process holds now, summed over the cards; {} without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        text = subprocess.run(
            [smi, *QUERY], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return {}
    used: dict[int, int] = {}
    for line in text.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib)
    return used


def tree(pid: int) -> set[int]:
    """`pid` and every process below it (torchrun's workers, a server's children), from /proc."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        fields = text[
            text.rfind(")") + 2 :
        ].split()  # after the command name, which may hold spaces
        parent[int(stat.parent.name)] = int(fields[1])
    found, todo = {pid}, [pid]
    while todo:
        here = todo.pop()
        for child, ppid in parent.items():
            if ppid == here and child not in found:
                found.add(child)
                todo.append(child)
    return found


class GpuWatch:
    """Peak MiB per name of the process trees it is shown, looked at most every `EVERY_S`."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self._last = 0.0
        self.available = shutil.which("nvidia-smi") is not None

    def look(self, pids: dict[str, int], force: bool = False) -> None:
        """Update the peaks of the named process trees (`name -> root pid`)."""
        if (
            not self.available
            or not pids
            or (not force and time.monotonic() - self._last < EVERY_S)
        ):
            return
        self._last = time.monotonic()
        used = used_by_pid()
        for name, pid in pids.items():
            mib = sum(used.get(p, 0) for p in tree(pid))
            self.peak[name] = max(self.peak.get(name, 0), mib)
