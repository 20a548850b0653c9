"""Run a job in a fresh isolated child (`run_tests_in_sandbox`), or many at a time (`run_many`).

The parent side of one run: check the preconditions, harden the tests, reserve a uid, start the
harness under ``unshare`` on the base interpreter with the job on stdin and a result socket as an
extra fd, then collect its records into a TestReport. The package docstring describes the isolation
and what it guarantees; the steps live in `isolation`, `hardening` and `records`, and the child side
in `harness.py` and `strict_operators.py`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import logging
import marshal
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchestry.envs.code.sandbox.hardening import harden_snippet
from orchestry.envs.code.sandbox.isolation import (
    CHECKER,
    HARNESS,
    STRICT_OPERATORS,
    WIRE,
    WORKER,
    base_python,
    preconditions,
    reserved_uids,
)
from orchestry.envs.code.sandbox.job import (
    SandboxJob,
    SandboxLimits,
    SandboxUnavailable,
    TestReport,
)
from orchestry.envs.code.sandbox.records import collect, report_from_records

log = logging.getLogger(__name__)

_CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp",
    "PYTHONHASHSEED": "0",
}


# The probe's own small limits (not a user setting: params `sandbox` sets the limits of real runs).
PROBE_LIMITS = SandboxLimits(
    timeout_s=10.0, cpu_s=5, memory_mb=256, max_processes=8, max_file_mb=1, max_output_kb=8
)


def check_isolation_available() -> None:
    """Raise SandboxUnavailable, saying what is missing, unless an isolated run works here."""
    problem, _ = preconditions()
    if problem is not None:
        raise SandboxUnavailable(problem)
    probe = run_tests_in_sandbox(
        SandboxJob(program="x = 1", tests=("assert x == 1",)), PROBE_LIMITS
    )
    if probe.passed != (True,):
        raise SandboxUnavailable(f"the sandbox probe did not pass: {probe}")


def _sandbox_command(unshare: str, python: str) -> list[str]:
    """unshare's child is pid 1 of the new namespaces; the base interpreter runs the harness.

    -S -s -P: no site, no user site, no script directory on sys.path. Not -E/-I: the environment
    is exactly _CHILD_ENV, and its PYTHONHASHSEED makes set and dict-of-str order reproducible.
    -u: output written before a kill still reaches the parent. -B: the filesystem is read-only.
    """
    namespaces = ["--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    return [unshare, *namespaces, python, "-S", "-s", "-P", "-u", "-B", str(HARNESS)]


def run_tests_in_sandbox(job: SandboxJob, limits: SandboxLimits) -> TestReport:
    """Run `job.program`, then `job.setup`, then each test in a fresh isolated process."""
    problem, unshare = preconditions()
    if problem is not None:
        raise SandboxUnavailable(problem)
    tests = []
    for i, test in enumerate(job.tests, 1):
        try:
            tests.append(compiled_snippet(test, f"<test {i}>"))
        except SyntaxError as exc:
            raise ValueError(f"test {i} of the job is not valid Python: {exc}") from exc
    try:
        setup = compiled_snippet(job.setup, "<setup>")
    except SyntaxError as exc:
        raise ValueError(f"the job's setup is not valid Python: {exc}") from exc

    python = base_python()
    keep = sorted(
        {
            os.path.realpath(sys.base_prefix),
            os.path.realpath(sys.base_exec_prefix),
            str(Path(python).parent.parent),
        }
    )
    code = _child_code(WIRE, WORKER, CHECKER, STRICT_OPERATORS)
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent_end, child_end, reserved_uids() as (worker_uid, checker_uid):
        # The first part is all the program's process ever sees: no test, no nonce. It carries
        # every child-side source, so pid 1 compiles them all before anything runs.
        program_part = {
            "result_fd": child_end.fileno(),
            "wire": code["wire"],
            "worker": code["worker"],
            "checker": code["checker"],
            "strict_operators": code["strict_operators"],
            "program": job.program,
            "worker_uid": worker_uid,
            "checker_uid": checker_uid,
            "hidden": [os.path.realpath(p) for p in limits.hidden_paths],
            "keep": keep,
            "tmp_mb": 4 * limits.max_file_mb,
            "timeout_s": float(limits.timeout_s),
            "limits": {
                "cpu_s": limits.cpu_s,
                "memory_mb": limits.memory_mb,
                "max_processes": limits.max_processes,
                "max_file_mb": limits.max_file_mb,
            },
        }
        nonce = secrets.token_hex(16)
        tests_part = {
            "nonce": nonce,
            "setup": setup,
            "tests": tests,
            "entry_point": job.entry_point,
            "names": program_names(job.setup, job.tests, job.entry_point),
        }
        payload = b"".join(_part(part) for part in (program_part, tests_part))
        try:
            proc = subprocess.Popen(
                _sandbox_command(unshare, python),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(child_end.fileno(),),
                env=_CHILD_ENV,
                cwd="/",
                start_new_session=True,
            )
        finally:
            child_end.close()
        with proc:
            assert proc.stdin is not None
            # pid 1 reads the first part, forks the program's process, then reads the second;
            # it prints nothing, so this write cannot wait on the output pipe.
            try:
                proc.stdin.write(payload)
                proc.stdin.close()
            except BrokenPipeError:
                pass  # the child died at start; its output says why and no "R" record came
            records, output, killed = collect(
                proc, parent_end, nonce.encode(), limits, max_records=4 * len(tests) + 16
            )
    return report_from_records(len(tests), records, output, killed)


def _child_code(*files: Path) -> dict[str, bytes]:
    """Each child-side module compiled here, as marshal'd code (the harness runs it as is).

    Read on every run, like the harness script itself, so the child-side files never disagree;
    compiled once per text, so a run does not pay for compiling them. A file that does not compile
    stops the run before anything starts.
    """
    out = {}
    for path in files:
        try:
            out[path.stem] = _compiled(path.stem, path.read_text(encoding="utf-8"))
        except SyntaxError as exc:
            raise SandboxUnavailable(
                f"the sandbox's child side {path} does not compile: {exc}"
            ) from exc
    return out


@functools.lru_cache(maxsize=16)
def _compiled(name: str, source: str) -> bytes:
    return marshal.dumps(compile(source, f"<{name}>", "exec", dont_inherit=True))


def _part(part: dict[str, object]) -> bytes:
    data = marshal.dumps(part)
    return len(data).to_bytes(8, "big") + data


@functools.lru_cache(maxsize=4096)
def compiled_snippet(source: str, filename: str) -> bytes:
    """A test or setup, hardened and compiled here, as marshal'd code for the checker."""
    return marshal.dumps(compile(harden_snippet(source), filename, "exec", dont_inherit=True))


@functools.lru_cache(maxsize=4096)
def program_names(setup: str, tests: tuple[str, ...], entry_point: str | None) -> list[str]:
    """The names the setup and the tests read that the program may define (builtins excluded).

    The checker asks the program's process for these alone and binds them as proxies or values;
    a program global named like a builtin does not shadow it in the tests.
    """
    names: set[str] = set()
    for snippet in (setup, *tests):
        for node in ast.walk(ast.parse(snippet)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                names.add(node.id)
    if entry_point is not None:
        names.add(entry_point)
    return sorted(n for n in names if not hasattr(builtins, n) and not n.startswith("__sandbox_"))


def run_many(jobs: Sequence[SandboxJob], limits: SandboxLimits, workers: int) -> list[TestReport]:
    """Run jobs with at most `workers` sandboxes at a time; reports come back in job order."""
    if workers < 1:
        raise ValueError(f"run_many: workers must be at least 1, got {workers}")
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        reports = list(pool.map(lambda job: run_tests_in_sandbox(job, limits), jobs))
    near = near_cpu_limit(reports, limits)
    if near:
        log.warning(
            "%d of %d programs finished using more than half of sandbox.cpu_s (%d s): a score "
            "decided near the CPU limit can differ between runs (docs/troubleshooting.md)",
            len(near),
            len(reports),
            limits.cpu_s,
        )
    return reports


def near_cpu_limit(reports: Sequence[TestReport], limits: SandboxLimits) -> list[int]:
    """Indices of the reports whose program was not stopped but used over half of `cpu_s`."""
    return [
        i
        for i, r in enumerate(reports)
        if not r.timed_out and r.cpu_used_s is not None and r.cpu_used_s > limits.cpu_s / 2
    ]
