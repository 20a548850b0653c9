"""The experiment runner's stages: dvc.yaml's commands and the order they may run in.

`run_stages` runs every stage of both pipelines (dvc.yaml, then the opt-in optional/dvc.yaml) in an
experiment's work folder, with the commands DVC runs, skipping those whose stamp says they are done;
with `jobs` > 1, stages that read none of each other's outputs run at once (the dvc.yaml deps and outs
say which). Not imported by any stage, so changing it reruns none.

On a GPU (`model.device: cuda`) with `jobs` > 1 the stages share the card: each gets
`card_share.share_for_jobs(jobs)` of it (`ORCHESTRY_GPU_SHARE`; its allocator is capped there and its
memory plans read it), and each stage's peak GPU memory is recorded (`gpu_watch`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from orchestry import io
from orchestry.agents.lora import card_share
from orchestry.bookkeeping import code_deps, fingerprint
from orchestry.bookkeeping.gpu_watch import GpuWatch
from orchestry.params import Params, load_params

ROOT = Path(__file__).resolve().parents[2]
STATE = ".experiment"  # in the work folder: one stamp per finished stage, the stage times
OPTIONAL = Path("optional/dvc.yaml")  # opt-in stages: run only when `--only` names them
FINGERPRINTS = "fingerprints"  # dvc.yaml's first stage: writes the others' code fingerprints
GPU_PEAKS = "gpu_peak_mib.json"  # in STATE: each stage's peak GPU memory (MiB, nvidia-smi's)


class ExperimentFailed(Exception):
    """A stage exited non-zero; the message names it and its log."""


def stage_commands(dvc_yaml: Path) -> list[tuple[str, str]]:
    """(name, command) for every stage of dvc.yaml in its order, `foreach` stages expanded."""
    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    out: list[tuple[str, str]] = []
    for name, stage in stages.items():
        if "foreach" in stage:
            for item in stage["foreach"]:
                out.append((f"{name}@{item}", stage["do"]["cmd"].replace("${item}", str(item))))
        else:
            out.append((name, stage["cmd"]))
    return out


def pipeline_commands() -> list[tuple[str, str]]:
    """The stages of dvc.yaml, then the opt-in ones of optional/dvc.yaml."""
    return stage_commands(ROOT / "dvc.yaml") + stage_commands(ROOT / OPTIONAL)


def with_params(cmd: str, params_file: str) -> list[str]:
    """dvc.yaml's `python -m orchestry ...` as argv for this interpreter on the experiment's params."""
    argv = shlex.split(cmd)
    if argv[:3] != ["python", "-m", "orchestry"]:
        raise ValueError(f"unexpected stage command in dvc.yaml: {cmd!r}")
    return [sys.executable, "-m", "orchestry", "--params", params_file, *argv[3:]]


def stage_code_hash(name: str, params: Params) -> str:
    """A hash of the code a stage runs for these params (its fingerprint): a stage whose code
    changed is not done. The `fingerprints` stage's: every stage's (its outputs)."""
    stage = name.split("@")[0]
    stages = [stage] if stage in code_deps.STAGES else list(code_deps.STAGES)
    text = "".join(fingerprint.fingerprint(s, params) for s in stages)
    return hashlib.sha256(text.encode()).hexdigest()


def stage_io(dvc_yaml: Path) -> dict[str, tuple[set[str], set[str]]]:
    """Stage name -> (deps, outs) of a dvc.yaml, `foreach` stages expanded."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for name, stage in yaml.safe_load(dvc_yaml.read_text())["stages"].items():
        items = stage["foreach"] if "foreach" in stage else [None]
        body = stage.get("do", stage)
        for item in items:
            text = yaml.safe_dump(body)
            if item is not None:
                text = text.replace("${item}", str(item))
            s = yaml.safe_load(text)
            outs = {
                next(iter(o)) if isinstance(o, dict) else o
                for o in s.get("outs", []) + s.get("metrics", []) + s.get("plots", [])
            }
            out[f"{name}@{item}" if item is not None else name] = (set(s.get("deps", [])), outs)
    return out


def stage_needs() -> dict[str, set[str]]:
    """Stage -> the earlier stages (of both pipelines, in order) whose outputs it reads."""
    io_of = {**stage_io(ROOT / "dvc.yaml"), **stage_io(ROOT / OPTIONAL)}

    def reads(dep: str, out: str) -> bool:
        return dep == out or dep.startswith(out.rstrip("/") + "/") or out.startswith(dep + "/")

    order = [name for name, _ in pipeline_commands()]
    return {
        name: {
            earlier
            for earlier in order[:i]
            if any(reads(d, o) for d in io_of[name][0] for o in io_of[earlier][1])
        }
        for i, name in enumerate(order)
    }


def stage_params(dvc_yaml: Path) -> dict[str, list[str]]:
    """Stage name -> the params keys (dotted, as dvc.yaml lists them) the stage reads, `foreach`
    stages expanded."""
    out: dict[str, list[str]] = {}
    for name, stage in yaml.safe_load(dvc_yaml.read_text())["stages"].items():
        body = stage.get("do", stage)
        keys: list[str] = []
        for entry in body.get("params", []):
            keys += (
                [k for group in entry.values() for k in group]
                if isinstance(entry, dict)
                else [entry]
            )
        for item in stage["foreach"] if "foreach" in stage else [None]:
            out[name if item is None else f"{name}@{item}"] = keys
    return out


def params_read(params_text: str, keys: list[str]) -> str:
    """The values of `keys` (dotted) in a params file's text, as one canonical string: what a stage
    reads of the params, so that a key it does not read leaves its stamp alone."""
    raw = yaml.safe_load(params_text) or {}
    picked = {}
    for key in keys:
        value: Any = raw
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        picked[key] = value
    return json.dumps(picked, sort_keys=True)


def gpu_share_env(device: str, jobs: int) -> dict[str, str]:
    """The environment that gives each of `jobs` stages its share of a GPU (`card_share`): {} on a
    CPU or one stage at a time (a lone stage has the whole card). A share set beforehand stays, for
    one stage too: whoever runs several experiments on one card divides it between them."""
    preset = os.environ.get(card_share.SHARE_VARIABLE, "").strip()
    if not device.startswith("cuda") or (jobs <= 1 and not preset):
        return {}
    fraction = preset or f"{card_share.share_for_jobs(jobs):.4f}"
    return {card_share.SHARE_VARIABLE: fraction, card_share.ALLOCATOR[0]: card_share.ALLOCATOR[1]}


def run_stages(
    work: Path,
    origin: str,
    log,
    skip: tuple[str, ...] = (),
    only: tuple[str, ...] = (),
    jobs: int = 1,
) -> dict[str, float]:
    """Every stage not yet done, but those in `skip` (and, when `only` names stages, but those it
    does not name); returns the wall seconds each stage has taken so far. A stage is done when its
    stamp (over the params keys its dvc.yaml entry lists, `origin`, its command, its code and the
    stamps of the stages whose outputs it reads) matches the one it left: after a code or params
    change that stage and the stages that read it run again, no other (a work folder copied from
    another experiment keeps the stages that read none of the keys they differ in).
    Stages start in dvc.yaml's order, up to `jobs` at once, each once the stages whose outputs it
    reads have finished; after a failure no new stage starts and the running ones finish."""
    state = work / STATE
    state.mkdir(exist_ok=True)
    times_file, peaks_file = state / "times.json", state / GPU_PEAKS
    times = json.loads(times_file.read_text()) if times_file.exists() else {}
    peaks = json.loads(peaks_file.read_text()) if peaks_file.exists() else {}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    params_text = (work / "params.yaml").read_text()
    params = load_params(work / "params.yaml")
    shared = gpu_share_env(params.model.device, jobs)
    if shared:
        env.update(shared)
        log(
            f"{jobs} stages may share the GPU: each may hold {shared[card_share.SHARE_VARIABLE]} of it"
        )
    watch = GpuWatch()
    optional = {n for n, _ in stage_commands(ROOT / OPTIONAL)}
    needs = stage_needs()
    reads_params = {**stage_params(ROOT / "dvc.yaml"), **stage_params(ROOT / OPTIONAL)}
    stamps: dict[str, str] = {}
    todo: list[tuple[str, str, str]] = []  # (name, command, stamp) of the stages to run, in order
    for name, cmd in pipeline_commands():
        # over the params it reads, the work folder's inputs, its command, its code and the stamps
        # of the stages it reads (not the fingerprints': its own code hash is its fingerprint)
        read = "".join(stamps[n] for n in sorted(needs[name] - {FINGERPRINTS}))
        own = params_read(params_text, reads_params.get(name, []))
        text = f"{own}\n{origin}\n{cmd}\n{stage_code_hash(name, params)}\n{read}"
        stamp = stamps[name] = hashlib.sha256(text.encode()).hexdigest()
        done = state / f"{name}.done"
        if name in skip:
            log(f"{name}: skipped (--trained)")
        elif (only or name in optional) and name not in only:
            log(f"{name}: not run ({'opt-in' if name in optional else '--only'})")
        elif done.exists() and done.read_text() == stamp:
            log(f"{name}: done before, skipped")
        else:
            done.unlink(missing_ok=True)
            todo.append((name, cmd, stamp))
    waiting = {name for name, _, _ in todo}
    running: dict[str, tuple[subprocess.Popen, float, str]] = {}
    failed: list[str] = []
    while todo or running:
        for item in list(todo):
            name, cmd, stage_stamp = item
            if failed or len(running) >= max(1, jobs):
                break
            if needs[name] & waiting:
                continue
            todo.remove(item)
            log(f"{name}: {cmd}")
            argv = with_params(cmd, "params.yaml")
            running[name] = (
                subprocess.Popen(argv, cwd=work, env=env),
                time.perf_counter(),
                stage_stamp,
            )
        if failed and not running:
            break
        watch.look({n: proc.pid for n, (proc, _, _) in running.items()})
        finished = [n for n, (proc, _, _) in running.items() if proc.poll() is not None]
        if not finished:
            time.sleep(0.2)
            continue
        for name in finished:
            proc, t0, stage_stamp = running.pop(name)
            times[name] = times.get(name, 0.0) + time.perf_counter() - t0
            io.write_json(times_file, times)
            if name in watch.peak:
                peaks[name] = max(peaks.get(name, 0), watch.peak.pop(name))
                io.write_json(peaks_file, peaks)
            if proc.returncode != 0:
                failed.append(
                    f"stage {name} exited {proc.returncode} (log: {work / 'logs' / (name.replace('@', '_') + '.log')})"
                )
                continue
            waiting.discard(name)
            io.write_text(state / f"{name}.done", stage_stamp)
            log(f"{name}: {times[name]:.0f} s")
    if failed:
        raise ExperimentFailed(
            "; ".join(failed) + "; run the same command again to go on from there"
        )
    return times
