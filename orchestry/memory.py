"""Process memory: hand freed memory back to the system at once (glibc).

glibc serves large allocations with mmap, but after such a block is freed it raises its mmap threshold
(up to 32 MiB), so later tensors of a few MiB come from the heap and stay resident after they are
freed. A training step allocates and frees hundreds of such tensors; measured on the embedded model,
one 8-row update peaked 3.1 GiB above the loaded model with the dynamic threshold and 0.95 GiB with a
fixed 64 KiB one (benchmarks/README.md). Calling `mallopt(M_MMAP_THRESHOLD)` fixes the threshold.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_MMAP_THRESHOLD = -3
THRESHOLD = 64 * 1024


def release_freed_memory() -> bool:
    """Fix glibc's mmap threshold at 64 KiB; True if it was set (False off glibc)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD))
