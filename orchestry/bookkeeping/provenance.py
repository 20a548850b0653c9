"""The manifest a result carries: the commit and code that made it, on which params and machine.

A number without one is a rumour. `manifest` records the git commit and whether the code differed from
it (dirty), a hash of the producing code (every file in the stages' import closures, so two runs of
the same code have the same hash whatever the commit), the params, the machine, the date and the wall
time. A copy sent to another machine (a GPU node) may have no git, or a stale one: there the launcher
names the commit in `ORCHESTRY_COMMIT`, which wins over git, and dirty is unknown (null); the code
hash says whether the code was that commit's.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from orchestry import paths

MANIFEST = "manifest.json"  # in every folder of reports/
RUN_LOGS = Path("logs")  # untracked: each stage run's machine, date, wall time and commit
BENCH = Path("results/bench")  # the benchmarks' records
BENCH_SUFFIX = ".manifest.json"  # beside every results/bench/<name>.json: <name>.manifest.json


def code_hash(root: Path, files: Iterable[str]) -> str:
    """sha256 over each file's path (relative to `root`) and bytes, in sorted order."""
    digest = hashlib.sha256()
    for rel in sorted(set(files)):
        digest.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return digest.hexdigest()


def git_state(root: Path, files: Iterable[str]) -> tuple[str, bool | None]:
    """(commit, dirty): HEAD, and whether any of `files` differs from it; where the launcher named
    the commit (`ORCHESTRY_COMMIT`) or there is no git, that name (or "unknown") and None."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)

    if os.environ.get("ORCHESTRY_COMMIT"):
        return os.environ["ORCHESTRY_COMMIT"], None
    try:
        head = git("rev-parse", "HEAD")
    except OSError:
        head = None
    if head is None or head.returncode != 0:
        return os.environ.get("ORCHESTRY_COMMIT", "unknown"), None
    status = git("status", "--porcelain", "--", *sorted(set(files)))
    return head.stdout.strip(), bool(status.stdout.strip())


def manifest(
    root: Path,
    files: Iterable[str],
    params: dict[str, Any],
    hardware: dict[str, Any],
    started: float,
    wall_s: float,
) -> dict[str, Any]:
    """The record of one result: commit, dirty, code hash, params, hardware, date, wall time."""
    files = sorted(set(files))
    commit, dirty = git_state(root, files)
    return {
        "commit": commit,
        "dirty": dirty,
        "code_sha256": code_hash(root, files),
        "code_files": len(files),
        "params": params,
        "hardware": hardware,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": round(wall_s, 1),
    }


def hardware() -> dict[str, Any]:
    """The machine a result was made on, in words a reader can compare."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
    }
    for package in ("torch", "transformers", "peft"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    gpu = shutil.which("nvidia-smi")
    if gpu:
        query = [gpu, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
        found = subprocess.run(query, capture_output=True, text=True, check=False).stdout
        info["gpus"] = [line.strip() for line in found.splitlines() if line.strip()]
    return info


def bench_manifest_path(record: Path) -> Path:
    """Where a benchmark record's manifest lies: results/bench/x.json -> x.manifest.json."""
    return record.with_name(record.stem + BENCH_SUFFIX)


def write_bench_manifest(record: Path, script: str, argv: list[str], started: float) -> Path:
    """The manifest beside a benchmark's record: its code (the script, the sibling scripts and our
    modules it imports), its command line in place of params, the machine, the date and the wall time
    since `started`. Benchmarks call it after writing `record`."""
    from orchestry.bookkeeping import code_deps  # the import graph, read only here

    files = code_deps.script_code(Path(script))
    made = manifest(
        code_deps.ROOT, files, {"argv": argv}, hardware(), started, time.time() - started
    )
    path = bench_manifest_path(record)
    path.write_text(json.dumps(made, indent=2) + "\n")
    return path


def fingerprint_path(stage: str) -> Path:
    """Where a stage's code fingerprint lies (bookkeeping/fingerprint.py writes it)."""
    return paths.FINGERPRINTS / f"{stage}.txt"


def read_fingerprint(stage: str) -> dict[str, str]:
    """A stage's written fingerprint as {file: hash of its code}."""
    lines = fingerprint_path(stage).read_text().splitlines()
    return {f: h for h, f in (line.split("  ", 1) for line in lines if line)}


def stage_manifest(stage: str, params: dict[str, Any]) -> dict[str, Any]:
    """A pipeline stage's manifest, the same for the same code and params (DVC and git keep it
    unchanged when nothing changed): the stage, its code (the fingerprint the stage ran with:
    each file and the hash of its code, and one hash over them) and the params. The commit of a
    committed result is the git commit holding it (dvc.lock there has its inputs' hashes); the
    run's machine, date and wall time are in `run_record`'s file, kept out of git."""
    text = fingerprint_path(stage).read_text()
    code = read_fingerprint(stage)
    return {
        "stage": stage,
        "code_sha256": hashlib.sha256(text.encode()).hexdigest(),
        "code_files": len(code),
        "code": code,
        "params": params,
    }


def write_run_record(stage: str, started: float, root: Path) -> Path:
    """logs/<stage>.run.json (gitignored): what differs between two runs of the same code and
    params: the commit and dirty flag at run time, the machine, the date and the wall time."""
    from orchestry.bookkeeping import code_deps

    commit, dirty = git_state(code_deps.ROOT, read_fingerprint(stage))
    record = {
        "stage": stage,
        "commit": commit,
        "dirty": dirty,
        "hardware": hardware(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "wall_s": round(time.time() - started, 1),
    }
    path = root / RUN_LOGS / f"{stage}.run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
