"""What a sandbox run takes (SandboxJob, SandboxLimits) and what it gives back (TestReport).

These are the types callers build and read; they carry no behaviour beyond validating the limits,
so the reward, prompt and evaluation code can import them without pulling in the run machinery.
SandboxUnavailable lives here too: it is part of the contract (raised when nothing could be run),
not a detail of any one step.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path


class SandboxUnavailable(RuntimeError):
    """Isolation cannot be set up here (not root, no unshare, mounts refused); nothing was run."""


def default_hidden_paths() -> tuple[str, ...]:
    """Directories the sandboxed code must not see: this checkout, the venv, the home directory."""
    # parents[4] of orchestry/envs/code/sandbox/job.py is the checkout root.
    paths = {str(Path(__file__).resolve().parents[4]), str(Path.home().resolve())}
    if sys.prefix != sys.base_prefix:
        paths.add(str(Path(sys.prefix).resolve()))
    return tuple(sorted(paths))


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """Resource limits for one program and its tests (values: params `sandbox`, their one home)."""

    timeout_s: float
    """Wall clock for the whole program and its tests."""
    cpu_s: int
    """RLIMIT_CPU of the process running the code (SIGXCPU, then SIGKILL one second later)."""
    memory_mb: int
    """RLIMIT_AS of that process."""
    max_processes: int
    """RLIMIT_NPROC of the sandbox uid (binds because the code does not run as root)."""
    max_file_mb: int
    """RLIMIT_FSIZE; the private /tmp holds at most four times this."""
    max_output_kb: int
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
    cpu_used_s: float | None = field(default=None, compare=False)
    """CPU seconds the program's process used (user + system); None when the harness did not say.

    A measurement, not an outcome: two reports of the same program compare equal whatever it
    reads. Against `SandboxLimits.cpu_s`: a score decided near that limit can differ between two
    runs of the same program on a loaded machine."""

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
