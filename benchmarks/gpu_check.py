"""`make gpu-check`: every GPU command that README.md and docs/gpu.md document, run at tiny scale,
each in fresh processes, on the GPUs this machine has. Writes `--out` (results/bench/gpu_check.json)
and its manifest: per check its exit code, seconds, peak GPU memory (nvidia-smi's, the check's
process trees) and, when it fails, the last error line of its log. Exits 1 if any check fails or
any documented GPU command has no check (they are listed under `unchecked`), 0 otherwise.

A documented command is a line of a ```bash block in those two files (continuation lines joined,
comments dropped) that names a GPU: `model.device=cuda`, `torchrun`, `--device cuda`, `processes=`,
or an experiment config that sets `model.device: cuda` (gpu.yaml, paper.yaml). Each check says
which documented commands it stands for; the check runs the same entry point on tiny params (the
stage commands of dvc.yaml through the experiment runner, as `dvc exp run` would run them), so a
command it covers that breaks on the GPU breaks here. Checks that need two GPUs are recorded as
skipped, not failed, on a machine with one.

    python benchmarks/gpu_check.py --out results/bench/gpu_check.json
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestry import io  # noqa: E402
from orchestry.bookkeeping.gpu_watch import GpuWatch  # noqa: E402
from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402

DOCS = ("README.md", "docs/gpu.md")
GPU_MARKERS = re.compile(
    r"model\.device=cuda|torchrun|--device cuda|processes=|experiments/(gpu|paper)\.yaml"
)
DEVICE = ["cuda"]
"""The device every check's tiny params name (`--device cpu`: a dry run of the checks' plumbing)."""
RUNNER = [sys.executable, "-m", "orchestry.bookkeeping.experiment"]
EVERY_OTHER_STAGE = (
    "prepare,train,train_single,baseline@single,baseline@naive_concat,baseline@sequential,"
    "baseline@discussion,evaluate,evaluate_single,prompt_policy,beam,schemes,figures"
)
TINY = {
    "sampling": {"max_new_tokens": 64},
    "prepare": {
        "sets": {
            "coop": {"n_train": 3, "n_test": 1},
            "humaneval": {"n_train": 0, "n_test": 0},
        }
    },
    "train": {
        "max_steps": 2,
        "problems_per_step": 2,
        "group_size": 4,
        "checkpoint_every": 1,
        "warmup_steps": 0,
    },
    "smoke": {"steps": 1, "problems": 2},
    "evaluate": {"n_samples": 2, "bootstrap": 20},
    "prompt_policy": {
        "rounds": 1,
        "minibatch": 1,
        "samples": 1,
        "pareto_tasks": 1,
        "reflect_tokens": 24,
    },
    "beam": {"width": 1, "k": 2, "turns": 1, "searches": 1},
}
"""tests/conftest.py's tiny params (a few problems, two training steps, two samples), on a GPU."""
GPU_YAML_SETS = {
    "coop": {"n_train": 3, "n_test": 1},
    "humaneval": {"n_train": 0, "n_test": 0},
    "gen": {"n_train": 4, "n_test": 0},
    "gen_unseen": {"n_train": 0, "n_test": 2},
    "humaneval_paper": {"n_train": 0, "n_test": 2},
}
"""gpu.yaml's sets, shrunk alike."""


def documented_commands() -> dict[str, list[str]]:
    """The GPU commands of each file of `DOCS`, as written (continuations joined, comments off)."""
    found: dict[str, list[str]] = {}
    for name in DOCS:
        commands, block, line = [], False, ""
        for raw in (ROOT / name).read_text().splitlines():
            if raw.startswith("```"):
                block, line = raw.strip() == "```bash", ""
                continue
            if not block:
                continue
            text = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
            line = f"{line} {text}".strip() if line else text
            if line.endswith("\\"):
                line = line[:-1].strip()
                continue
            if line and GPU_MARKERS.search(line):
                commands.append(re.sub(r"\s+", " ", line))
            line = ""
        found[name] = commands
    return found


@dataclass
class Check:
    """One check: the documented commands it stands for and the commands it runs, in order."""

    name: str
    covers: tuple[str, ...]
    """Prefixes of documented commands (whitespace collapsed) this check stands for."""
    steps: Callable[[Path], list[list[str]]]
    """The argv of each step, given the check's scratch folder."""
    cwd: str = ""
    """The experiment whose work folder the steps run in (default: the repository)."""
    gpus: int = 1
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)


def runner(name: str, configs: list[str], scratch: Path, *extra: str) -> list[str]:
    out = scratch / "report"
    return [
        *RUNNER,
        *configs,
        "--name",
        f"gpu_check_{name}",
        "--out",
        str(out),
        "--replace",
        *extra,
    ]


def tiny_config(scratch: Path, **changes: Any) -> str:
    """TINY, with `changes` merged section by section, as a config file in `scratch`."""
    config = {k: dict(v) for k, v in TINY.items()}
    config["model"] = {"device": DEVICE[0]}
    for section, values in changes.items():
        config.setdefault(section, {}).update(values)
    path = scratch / "tiny.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return str(path)


def header_jobs(config: str) -> list[str]:
    """The `--jobs N` an experiment config's header comment recommends ([] when none)."""
    text = (ROOT / config).read_text()
    match = re.search(r"^#.*--jobs (\d+)", text, re.M)
    return ["--jobs", match.group(1)] if match else []


def work(name: str) -> Path:
    """The experiment runner's work folder of a check."""
    return ROOT / "build" / "experiments" / f"gpu_check_{name}"


def pipeline_steps(scratch: Path) -> list[list[str]]:
    tiny = tiny_config(scratch)
    return [runner("pipeline", ["params.yaml", tiny], scratch, "--jobs", "4")]


def torchrun_steps(stage: str, processes: int) -> Callable[[Path], list[list[str]]]:
    def steps(scratch: Path) -> list[list[str]]:
        # the pipeline check's work folder (prepared data, a trained team); a new lr makes a new
        # training run rather than a resumed finished one
        params = yaml.safe_load((work("pipeline") / "params.yaml").read_text())
        params["train"]["lr"] = params["train"]["lr"] * 0.5
        path = work("pipeline") / f"params_torchrun_{processes}.yaml"
        path.write_text(yaml.safe_dump(params, sort_keys=False))
        return [
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={processes}",
                "-m",
                "orchestry",
                "--params",
                str(path),
                stage,
            ]
        ]

    return steps


def serve_steps(scratch: Path) -> list[list[str]]:
    code = f"""
import sys
from pathlib import Path
from openai import OpenAI
from orchestry.serve.launch import server_process
w = Path({str(work("pipeline"))!r})
with server_process(w / "params.yaml", w / "results/train/adapters", cwd=w,
                    log_file=Path({str(scratch / "serve.log")!r})) as url:
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    task = 'def add(a: int, b: int) -> int:\\n    \\"\\"\\"Return a + b.\\"\\"\\"\\n'
    for model in ("team", "aux"):
        reply = client.chat.completions.create(
            model=model, messages=[{{"role": "user", "content": task}}], max_tokens=32, seed=1)
        assert reply.choices[0].message.content is not None, model
        print(model, reply.usage)
"""
    return [[sys.executable, "-c", code]]


def paper_steps(scratch: Path) -> list[list[str]]:
    folder = scratch / "random-3b"
    local = scratch / "local.yaml"
    local.write_text(
        yaml.safe_dump(
            {
                "model": {"name": str(folder)},
                "prepare": {"sets": {"humaneval_paper": {"n_train": 2, "n_test": 2}}},
                "train": {"max_steps": 1, "epochs": 1},
                "sampling": {"max_new_tokens": 32},
                "evaluate": {"n_samples": 1, "bootstrap": 20},
            }
        )
    )
    make = [sys.executable, "-m", "orchestry.agents.lora.shapes", "qwen2.5-coder-3b"]
    only = "prepare,train,evaluate"
    config = "workflow/experiments/paper.yaml"
    return [
        [*make, str(folder), "--device", "cuda"],
        runner("paper", [config, str(local)], scratch, "--jobs", "2", "--only", only),
    ]


CHECKS = [
    Check(
        "pipeline",
        ("dvc exp run -S model.device=cuda",),
        pipeline_steps,
        note="dvc.yaml's stage commands on tiny params with model.device cuda, through the "
        "experiment runner (what `dvc exp run` runs, stage by stage)",
    ),
    Check(
        "gpu_yaml",
        ("python -m orchestry.bookkeeping.experiment workflow/experiments/gpu.yaml",),
        lambda s: [
            runner(
                "gpu_yaml",
                ["workflow/experiments/gpu.yaml", tiny_config(s, prepare={"sets": GPU_YAML_SETS})],
                s,
                *header_jobs("workflow/experiments/gpu.yaml"),
            )
        ],
        note="gpu.yaml with its header's --jobs, shrunk by tiny params",
    ),
    Check(
        "gpu_levers",
        (
            "python -m orchestry.bookkeeping.experiment workflow/experiments/gpu.yaml "
            "workflow/experiments/levers.yaml",
        ),
        lambda s: [
            runner(
                "gpu_levers",
                ["workflow/experiments/gpu.yaml", "workflow/experiments/levers.yaml"]
                + [tiny_config(s, prepare={"sets": GPU_YAML_SETS})],
                s,
                "--only",
                "prepare,smoke,train,evaluate",
            )
        ],
        note="the levers over gpu.yaml: prepare, smoke, train and evaluate",
    ),
    Check(
        "paper_random_3b",
        (
            "python -m orchestry.bookkeeping.experiment workflow/experiments/paper.yaml",
            "python -m orchestry.agents.lora.shapes",
        ),
        paper_steps,
        note="a random Qwen2.5-Coder-3B-shaped folder (no hub here), paper.yaml with it named in "
        "a second config: prepare, one training step, evaluate",
    ),
    Check(
        "torchrun_train_1",
        ("torchrun --nproc_per_node 2 -m orchestry train",),
        torchrun_steps("train", 1),
        cwd="pipeline",
        note="torchrun with one process (two on a machine with two GPUs: torchrun_train_2)",
    ),
    Check(
        "torchrun_evaluate_1",
        ("torchrun --nproc_per_node 2 -m orchestry evaluate",),
        torchrun_steps("evaluate", 1),
        cwd="pipeline",
    ),
    Check(
        "serve_cuda",
        (),
        serve_steps,
        cwd="pipeline",
        note="the server on the pipeline check's team (model.device cuda), answering the "
        "openai client for the team and one agent",
    ),
    Check("torchrun_train_2", (), torchrun_steps("train", 2), cwd="pipeline", gpus=2),
    Check("torchrun_evaluate_2", (), torchrun_steps("evaluate", 2), cwd="pipeline", gpus=2),
    Check(
        "two_gpus_data",
        (
            "dvc exp run -S model.device=cuda -S train.processes=2",
            "dvc exp run -S evaluate.processes=2",
        ),
        lambda s: [
            runner(
                "two_gpus_data",
                ["params.yaml", tiny_config(s, train={"processes": 2}, evaluate={"processes": 2})],
                s,
                "--only",
                "prepare,train,evaluate",
            )
        ],
        gpus=2,
    ),
    Check(
        "two_gpus_pipeline",
        ("dvc exp run -S model.device=cuda -S train.processes=2 -S train.parallel=pipeline",),
        lambda s: [
            runner(
                "two_gpus_pipeline",
                [
                    "params.yaml",
                    tiny_config(
                        s,
                        train={"processes": 2, "parallel": "pipeline", "rollouts_ahead": 1},
                    ),
                ],
                s,
                "--only",
                "prepare,train",
            )
        ],
        gpus=2,
    ),
]


def covered(command: str) -> list[str]:
    """The checks that stand for a documented command: those whose longest prefix of it is the
    longest (`... -S train.processes=2 -S train.parallel=pipeline` is the pipeline check's, not
    the one-GPU pipeline's)."""
    best = {
        c.name: max((len(p) for p in c.covers if command.startswith(p)), default=0) for c in CHECKS
    }
    most = max(best.values(), default=0)
    return [name for name, n in best.items() if n and n == most]


def selected(only: str) -> list[Check]:
    """The checks `--only` names (all when empty), in CHECKS' order, with each one whose work folder a
    named check runs in (`cwd`: `serve_cuda` and the torchrun checks need `pipeline`'s, run first). An
    unknown name is an error naming the known ones."""
    names = {c.name for c in CHECKS}
    wanted = {n.strip() for n in only.split(",") if n.strip()}
    unknown = sorted(wanted - names)
    if unknown:
        raise ValueError(
            f"unknown check(s) {', '.join(unknown)}; the checks: {', '.join(sorted(names))}"
        )
    if not wanted:
        return list(CHECKS)
    wanted |= {c.cwd for c in CHECKS if c.name in wanted and c.cwd}
    return [c for c in CHECKS if c.name in wanted]


def last_error(log: str) -> str:
    """The last line of a log that reads like an error, else its last line."""
    lines = [line for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if re.search(r"(E|e)rror: |Exception: |exited \d", line)]
    return (errors or lines or [""])[-1][-500:]


def run_check(check: Check, scratch: Path, timeout_s: float) -> dict[str, Any]:
    scratch.mkdir(parents=True, exist_ok=True)
    watch, log_path = GpuWatch(), scratch / "log.txt"
    env = {**os.environ, **check.env, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    start, code = time.perf_counter(), 0
    with log_path.open("w") as log:
        for argv in check.steps(scratch):
            log.write(f"$ {' '.join(argv)[:400]}\n")
            log.flush()
            cwd = work(check.cwd) if check.cwd else ROOT
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
            while proc.poll() is None:
                watch.look({check.name: proc.pid})
                time.sleep(0.2)
                if time.perf_counter() - start > timeout_s:
                    proc.kill()
                    proc.wait()
                    log.write(f"error: the check ran past {timeout_s:.0f} s\n")
                    break
            code = proc.returncode
            if code != 0:
                break
    text = log_path.read_text()
    result = {
        "exit": code,
        "seconds": round(time.perf_counter() - start, 1),
        "peak_gpu_mib": watch.peak.get(check.name),
        "commands": [line[2:] for line in text.splitlines() if line.startswith("$ ")],
    }
    if code != 0:
        result["error"] = last_error(text)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/gpu_check.json")
    parser.add_argument("--only", default="", help="comma-separated check names (default: all)")
    parser.add_argument(
        "--list", action="store_true", help="print the documented commands and exit"
    )
    parser.add_argument("--timeout", type=float, default=900, help="seconds a check may take")
    parser.add_argument(
        "--device",
        default="cuda",
        help="cpu: run the checks' commands on the CPU (a dry run of this script; records nothing "
        "unless --out is given)",
    )
    args = parser.parse_args(argv)
    documented = documented_commands()
    unchecked = sorted({c for cmds in documented.values() for c in cmds if not covered(c)})
    if args.list:
        for name, commands in documented.items():
            for command in commands:
                print(f"{name}: {command}\n    -> {', '.join(covered(command)) or 'UNCHECKED'}")
        return 1 if unchecked else 0
    try:
        checks = selected(args.only)
    except ValueError as e:
        print(f"error: --only: {e}", file=sys.stderr)
        return 2
    import torch

    DEVICE[0] = args.device
    gpus = torch.cuda.device_count() if args.device == "cuda" else 1
    if gpus == 0:
        print("error: no GPU visible: the GPU check runs on a GPU machine", file=sys.stderr)
        return 1
    results: dict[str, Any] = {}
    started = time.time()
    scratch_root = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    for check in checks:
        if check.gpus > gpus:
            results[check.name] = {"skipped": f"needs {check.gpus} GPUs, {gpus} visible"}
            print(f"{check.name}: skipped ({gpus} GPU)", flush=True)
            continue
        print(f"{check.name}: running", flush=True)
        results[check.name] = {
            "note": check.note,
            **run_check(check, scratch_root / check.name, args.timeout),
        }
        r = results[check.name]
        print(
            f"{check.name}: exit {r['exit']} in {r['seconds']} s, peak {r['peak_gpu_mib']} MiB "
            + (f"- {r['error']}" if r["exit"] else ""),
            flush=True,
        )
    failed = [n for n, r in results.items() if r.get("exit", 0) != 0]
    record = {
        "gpus": gpus,
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else args.device,
        "documented": {
            name: [{"command": c, "checks": covered(c)} for c in commands]
            for name, commands in documented.items()
        },
        "unchecked": unchecked,
        "checks": results,
        "failed": failed,
    }
    io.write_json(args.out, record)
    write_bench_manifest(args.out, __file__, sys.argv[1:] if argv is None else argv, started)
    shutil.rmtree(scratch_root, ignore_errors=True)
    for command in unchecked:
        print(f"documented but unchecked: {command}", file=sys.stderr)
    return 1 if failed or unchecked else 0


if __name__ == "__main__":
    sys.exit(main())
