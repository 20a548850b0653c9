"""`python -m orchestry serve` as a child process, waited on until /health answers: what the tests
and the load benchmark (benchmarks/serve_load.py) talk to, the real server and nothing less."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ServerProcess:
    """A started server: its base URL and its process (for its pid, a signal, its exit)."""

    url: str
    proc: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextmanager
def server_process(*args: Any, **kwargs: Any) -> Iterator[str]:
    """`running_server`'s base URL."""
    with running_server(*args, **kwargs) as server:
        yield server.url


@contextmanager
def running_server(
    params: Path,
    adapters: Path,
    args: Sequence[str] = (),
    log_file: Path | None = None,
    ready_s: float = 300.0,
    cwd: Path | None = None,
    torch_threads: int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[ServerProcess]:
    """Start the server on a free port, yield it once /health answers, stop it after (SIGTERM,
    then SIGKILL after 30 s). `torch_threads`: its OMP_NUM_THREADS (on a shared 2-core machine, 1
    is several times faster than torch's default); `env`: more environment (ORCHESTRY_API_KEY,
    say). Raises RuntimeError with the server's log tail if it exits or is not ready in
    `ready_s`."""
    port = free_port()
    cmd = [sys.executable, "-m", "orchestry", "serve", "--params", str(params)]
    cmd += ["--adapters", str(adapters), "--port", str(port), *args]
    out = open(log_file, "w") if log_file else subprocess.DEVNULL  # noqa: SIM115  # closed below
    threads = {"OMP_NUM_THREADS": str(torch_threads)} if torch_threads else {}
    environment = {**os.environ, **threads, **(env or {})}
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, url, ready_s, log_file)
        log.info("server %d ready at %s", proc.pid, url)
        yield ServerProcess(url, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log_file:
            out.close()


def _wait_healthy(proc: subprocess.Popen, url: str, ready_s: float, log_file: Path | None) -> None:
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}):\n{_tail(log_file)}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if json.load(r).get("status") == "ok":
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server was not ready in {ready_s:.0f} s:\n{_tail(log_file)}")


def _tail(log_file: Path | None) -> str:
    return log_file.read_text()[-3000:] if log_file and log_file.is_file() else "(no log)"
