"""The parent's end of the result protocol: collect the harness's records, turn them into a report.

The harness sends one SOCK_SEQPACKET record per outcome, ``nonce kind index hex(message)``; only
records that carry this run's random nonce count, and stdout and stderr are only captured (capped)
for feedback, so nothing the code prints or writes to another fd can pass a test. Record kinds:

- ``R`` isolation is up (without it the run fails loudly with SandboxUnavailable);
- ``E`` an isolation step failed (SandboxUnavailable);
- ``S`` the program has a syntax error, ``L`` it (or the setup, or the entry point) failed to load;
- ``P``/``F`` test `index` passed or failed, ``C`` every test ran;
- ``X`` the worker ended (exit code or signal), ``T`` the wall clock ran out;
- ``U`` the CPU seconds the worker used (``-1`` when unknown), always last.
"""

from __future__ import annotations

import os
import secrets
import selectors
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from orchestry.envs.code.sandbox.job import SandboxLimits, SandboxUnavailable, TestReport

# Extra wall clock the parent allows over timeout_s (interpreter start, mounts) before it kills.
START_GRACE_S = 5.0
# After a kill, how long the parent keeps draining the pipes while the namespace is torn down.
DRAIN_S = 2.0
RECORD_MAX = 8192


@dataclass(frozen=True)
class Record:
    """One outcome the harness reported."""

    kind: str
    index: int
    message: str


def parse_record(raw: bytes, nonce: bytes) -> Record | None:
    """The record in `raw`, or None when it is malformed or lacks this run's nonce."""
    parts = raw.split(b" ", 3)
    if len(parts) != 4 or not secrets.compare_digest(parts[0], nonce):
        return None
    try:
        message = bytes.fromhex(parts[3].decode("ascii")).decode("utf-8", "replace")
        return Record(parts[1].decode("ascii"), int(parts[2]), message)
    except ValueError:
        return None


def collect(
    proc: subprocess.Popen[bytes],
    results: socket.socket,
    nonce: bytes,
    limits: SandboxLimits,
    max_records: int,
) -> tuple[list[Record], str, bool]:
    """Read records and capped output until the namespace is gone; kill it past the deadline."""
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    cap = limits.max_output_kb * 1024
    output = bytearray()
    discarded = False
    records: list[Record] = []
    killed = False
    deadline = time.monotonic() + limits.timeout_s + START_GRACE_S
    with selectors.DefaultSelector() as sel:
        sel.register(out_fd, selectors.EVENT_READ)
        sel.register(results, selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if killed:
                    break
                proc.kill()  # --kill-child: pid 1 of the namespace dies, and with it every process
                killed = True
                deadline = time.monotonic() + DRAIN_S
                continue
            for key, _ in sel.select(remaining):
                if key.fileobj is results:
                    raw = results.recv(RECORD_MAX)
                    if not raw:
                        sel.unregister(results)
                    elif len(records) < max_records and (rec := parse_record(raw, nonce)):
                        records.append(rec)
                else:
                    chunk = os.read(out_fd, 65536)
                    if not chunk:
                        sel.unregister(out_fd)
                    else:
                        room = cap - len(output)
                        output += chunk[: max(room, 0)]
                        discarded = discarded or len(chunk) > room
    proc.wait()
    text = output.decode("utf-8", "replace")
    if discarded:
        text += f"\n[output beyond {limits.max_output_kb} KB discarded]"
    return records, text, killed


def _exit_text(status: str) -> str:
    """'signal 11' -> 'killed by SIGSEGV'; 'exit code 0' unchanged."""
    if status.startswith("signal "):
        number = int(status.removeprefix("signal "))
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return status


def _not_run_reason(records: list[Record], killed: bool) -> str:
    kinds = {r.kind: r for r in records}
    if "S" in kinds:
        return "no result (the program has a syntax error)"
    if "L" in kinds:
        return "no result (the program failed to load)"
    if "T" in kinds or killed:
        return "no result (timed out)"
    if "X" in kinds and kinds["X"].message == f"signal {signal.SIGXCPU}":
        return "no result (CPU time limit exceeded)"
    if "X" in kinds and "C" not in kinds:
        return f"no result (the program's process ended early: {_exit_text(kinds['X'].message)})"
    return "no result (none was reported)"


def report_from_records(
    n_tests: int, records: list[Record], output: str, killed: bool
) -> TestReport:
    """Turn the harness's records into a TestReport; raise if isolation never came up."""
    errors = [r.message for r in records if r.kind == "E"]
    if errors:
        raise SandboxUnavailable(f"sandbox isolation failed: {errors[0]}; output: {output[:2000]}")
    if not any(r.kind == "R" for r in records):
        why = "was killed before it got ready" if killed else "exited before it got ready"
        raise SandboxUnavailable(f"the sandbox {why}; output: {output[:2000]}")
    outcome: list[bool | None] = [None] * n_tests
    failures: dict[int, str] = {}
    for r in records:
        if r.kind in ("P", "F") and 1 <= r.index <= n_tests:
            # A forked copy of the harness may report a test twice: any failure wins.
            ok = r.kind == "P" and outcome[r.index - 1] is not False
            outcome[r.index - 1] = ok
            if r.kind == "F" and r.index not in failures:
                failures[r.index] = r.message
    timed_out = killed or any(
        r.kind == "T" or (r.kind == "X" and r.message == f"signal {signal.SIGXCPU}")
        for r in records
    )
    syntax = next((r.message for r in records if r.kind == "S"), None)
    load = next((r.message for r in records if r.kind == "L"), None)
    first_failure = None
    for i, ok in enumerate(outcome, 1):
        if not ok:
            reason = failures.get(i) or _not_run_reason(records, killed)
            first_failure = f"test {i}: {reason}"
            break
    cpu_used = next((r.message for r in records if r.kind == "U"), None)
    return TestReport(
        passed=tuple(bool(ok) for ok in outcome),
        first_failure=first_failure,
        syntax_error=syntax,
        load_error=load,
        timed_out=timed_out,
        output=output,
        cpu_used_s=_seconds(cpu_used),
    )


def _seconds(text: str | None) -> float | None:
    """The U record's CPU seconds; None when missing, malformed or unknown (negative)."""
    try:
        value = float(text) if text is not None else -1.0
    except ValueError:
        return None
    return value if value >= 0 else None
