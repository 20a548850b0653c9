"""The paper's model shapes on one card: 20 MAGRPO steps each at params defaults (issue 36).

For each shape (`135m` = SmolLM2-135M, `1.5b` = Qwen2.5-Coder-1.5B, `3b` = Qwen2.5-Coder-3B, the
paper's model) the benchmark builds a model of that architecture with random weights
(`orchestry/agents/lora/shapes.py`, cached under `model.cache_dir/random-<shape>`), then runs the
real training loop (`timed_train.run_ours`, the phases timed as in `gpu_step.py`) for `--steps`
steps with params.yaml's defaults (microbatch, checkpointing and graph recording `auto`) and on a
GPU `model.device: cuda`, `model.dtype: bfloat16` (as workflow/experiments/gpu.yaml), G=8 samples
× 8 problems a step × 128 new tokens, every completion forced to full length. A random model's
rewards are all 0, so N(0, `--reward-noise`) is added to each (flagged in the output): the update,
the thing measured, then runs on noise.

Each shape runs in a process of its own: an out-of-memory there is caught and recorded
(`oom: true`, the peak so far), the process's exit frees the card, and the next shape runs. A
non-finite gradient stops the loop with the step, adapter and parameter named (`TrainingFailed`),
recorded as `finite_every_step: false` with that message; otherwise every step's gradient norm
of every adapter is checked for finiteness here.

`--comlrl 3b` also runs CoMLRL's `MAGRPOTrainer` (PyPI `comlrl`: two fully fine-tuned copies
of the model, its own generation) on that shape's random model with the same G, problems, forced
tokens and reward noise, for `--comlrl-steps` steps in a process of its own after ours, and
writes `comlrl_step_seconds` (the median after its first step) and `ratio_vs_comlrl` (ours /
theirs) beside our keys; an out-of-memory there is recorded as `comlrl_oom` with its peak.
`--profile` runs our last step's generation and update under torch.profiler (`profiles`: the
costliest operators, and each phase's wall time against its summed GPU kernel time).

`--multi-gpu 3b` then, after the shapes (and CoMLRL), runs `multi_gpu.py`'s measurement on that
shape's random model with this run's steps, G, problems, forced tokens, reward noise and dtype: the
same global batch in one process and in 2 (`--multi-gpu-set`, by default `train.parallel=pipeline`
and `train.rollouts_ahead=1` in both runs: rank 1 generates while rank 0 updates), each in fresh
processes. It writes `multi_gpu_speedup_3b` (one process's median step seconds over two processes')
and a `multi_gpu` block: both step seconds, the world, the settings, the cards, each run's record,
and `error` (why it did not run, e.g. fewer than 2 GPUs visible; the speed-up is then null).

    python benchmarks/paper_scale.py --out results/bench/paper_scale.json --comlrl 3b --profile \
        --multi-gpu 3b

Writes `device` (the card and its memory), per shape `steps`, `finite_every_step`, `oom`,
`peak_gpu_mb`, `step_seconds`, `update_seconds`, `generation_tokens_per_s` (medians over the
steps after the warm-up, `timed_train.WARMUP_STEPS`), the memory plan `auto` chose, and a
manifest beside it (`paper_scale.manifest.json`, orchestry/bookkeeping/provenance.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import multi_gpu  # noqa: E402
import vs_comlrl  # noqa: E402
from timed_train import WARMUP_STEPS, job_args, override, run_ours  # noqa: E402

from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402
from orchestry.params import Params, load_params, parse_params  # noqa: E402

SHAPES = {"135m": "smollm2-135m", "1.5b": "qwen2.5-coder-1.5b", "3b": "qwen2.5-coder-3b"}
"""The benchmark's short names of the shapes in `orchestry/agents/lora/shapes.py`."""

BENCHMARK_CODE = (
    "benchmarks/paper_scale.py",
    "benchmarks/multi_gpu.py",
    "benchmarks/timed_train.py",
    "benchmarks/vs_comlrl.py",
    "orchestry/agents/lora/shapes.py",
)


def run_shape(job: dict[str, Any]) -> dict[str, Any]:
    """One shape in this process: build (or reuse) its random model, train, check the gradients.
    Out of memory and a non-finite gradient are recorded, not raised."""
    import torch

    from orchestry.agents.lora.shapes import random_shape_folder
    from orchestry.algos.pg_update import TrainingFailed
    from orchestry.stages.from_params import memory_plan

    cuda = job["device"] == "cuda"
    start = time.perf_counter()
    folder = random_shape_folder(SHAPES[job["shape"]], Path(job["cache_dir"]), job["device"])
    if cuda:
        torch.cuda.empty_cache()  # the build's weights are gone: the plan sees the whole card
    job["params"]["model"]["name"] = str(folder.resolve())
    out: dict[str, Any] = {"model": SHAPES[job["shape"]], "build_s": time.perf_counter() - start}
    out["model_dir"] = job["params"]["model"]["name"]  # `--multi-gpu` trains the same model
    params = parse_params(job["params"], "params.yaml + paper_scale overrides")
    out["memory_plan"] = asdict(memory_plan(params))
    try:
        timed = run_ours(job)
    except torch.OutOfMemoryError as error:
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        return {**out, "oom": True, "error": str(error)[:2000], "peak_gpu_mb": peak}
    except TrainingFailed as error:  # a non-finite loss or gradient, named by the update
        return {**out, "oom": False, "finite_every_step": False, "error": str(error)[:2000]}
    return {**out, **gradient_check(timed), "oom": False, **timed}


def run_comlrl_shape(job: dict[str, Any]) -> dict[str, Any]:
    """CoMLRL's MAGRPOTrainer (two full fine-tuned copies of the shape) on the same random model,
    G, problems and forced tokens, in this process; out of memory is recorded, not raised."""
    import torch

    from orchestry.agents.lora.shapes import random_shape_folder

    cuda = job["device"] == "cuda"
    folder = random_shape_folder(SHAPES[job["shape"]], Path(job["cache_dir"]), job["device"])
    job["params"]["model"]["name"] = job["model_dir"] = str(folder.resolve())
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        out = vs_comlrl.run_comlrl(job)
    except torch.OutOfMemoryError as error:
        peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
        return {"oom": True, "error": str(error)[:2000], "peak_gpu_mb": peak}
    out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    return {**out, "oom": False}


def comlrl_summary(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, Any]:
    """CoMLRL's keys beside ours: its steady step (the median after its first step) and the ratio."""
    steps = theirs.get("step_s") or []
    step = statistics.median(steps[1:] or steps) if steps else None
    mine = ours.get("step_seconds")
    return {
        "comlrl_steps": len(steps),
        "comlrl_step_seconds": step,
        "comlrl_step_s": steps,
        "comlrl_peak_gpu_mb": theirs.get("peak_gpu_mb"),
        "comlrl_oom": bool(theirs.get("oom")),
        "comlrl_error": theirs.get("error"),
        "ratio_vs_comlrl": mine / step if mine and step else None,
    }


MULTI_GPU_WORLD = 2
"""The processes (GPUs) of `--multi-gpu`'s second run."""

MULTI_GPU_SET = ("train.parallel=pipeline", "train.rollouts_ahead=1")
"""`--multi-gpu-set`'s default: the pipeline, rank 1 generating while rank 0 updates."""


def multi_gpu_params(job: dict[str, Any], sets: list[str]) -> Params:
    """The job's params with `--multi-gpu-set` applied (both runs take them), checked."""
    params = json.loads(json.dumps(job["params"]))  # a copy: the shapes' runs keep theirs
    override(params, sets)
    return parse_params(params, "params.yaml + paper_scale --multi-gpu-set")


def run_multi_gpu(
    job: dict[str, Any], model_dir: str | None, sets: list[str], tmp: Path
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """`multi_gpu.py`'s two runs of `job` on the model in `model_dir` (one process, then
    `MULTI_GPU_WORLD` ranks), each in fresh processes: the runs done, and why the rest did not run
    (None when both ran)."""
    if model_dir is None:
        return {}, "the shape's run built no random model (its error is in the shape's keys)"
    if job["device"] == "cuda":
        import torch

        if torch.cuda.device_count() < MULTI_GPU_WORLD:
            return {}, f"{MULTI_GPU_WORLD} GPUs needed, {torch.cuda.device_count()} visible"
    params = multi_gpu_params(job, sets).model_dump()
    params["model"]["name"] = model_dir
    job_path = tmp / "multi_gpu.job.json"
    job_path.write_text(json.dumps({**job, "params": params}))
    runs: dict[str, dict[str, Any]] = {}
    for world in (1, MULTI_GPU_WORLD):
        result = tmp / f"multi_gpu-world{world}.json"
        try:
            multi_gpu.launch(world, job_path, result)
        except subprocess.CalledProcessError as error:
            return runs, f"the {world}-process run ended with exit code {error.returncode}"
        runs[str(world)] = json.loads(result.read_text())
    return runs, None


def multi_gpu_summary(
    shape: str, runs: dict[str, dict[str, Any]], settings: dict[str, Any], error: str | None
) -> dict[str, Any]:
    """The `multi_gpu` block: the speed-up on the same global batch (one process's median step
    seconds over `MULTI_GPU_WORLD` processes'), None when a run is missing or failed."""
    one = runs.get("1", {}).get("step_seconds")
    two = runs.get(str(MULTI_GPU_WORLD), {}).get("step_seconds")
    return {
        "shape": shape,
        "speedup": one / two if one and two and error is None else None,
        "one_card_step_seconds": one,
        "two_cards_step_seconds": two,
        "world": MULTI_GPU_WORLD,
        "settings": settings,
        "devices": {world: run.get("devices") for world, run in runs.items()},
        "error": error,
        "runs": runs,
    }


def gradient_check(timed: dict[str, Any]) -> dict[str, Any]:
    """Whether every step updated every adapter with a finite gradient norm (before clipping)."""
    norms = timed["grad_norms"]
    updated = sum(1 for step in norms if step)
    finite = bool(norms) and all(
        step and all(math.isfinite(v) for v in step.values()) for step in norms
    )
    values = [v for step in norms for v in step.values()]
    return {
        "steps": len(timed["step_s"]),
        "steps_updated": updated,
        "finite_every_step": finite,
        "max_grad_norm": max(values) if values else None,
    }


def shape_summary(result: dict[str, Any]) -> dict[str, Any]:
    """The keys the acceptance names (and a few beside), from one shape's full result."""
    keys = (
        "model",
        "steps",
        "steps_updated",
        "finite_every_step",
        "oom",
        "peak_gpu_mb",
        "peak_gpu_reserved_mb",
        "step_seconds",
        "generation_seconds",
        "sandbox_seconds",
        "update_seconds",
        "generation_tokens_per_s",
        "compile_seconds",
        "gpu_util",
        "max_grad_norm",
        "build_s",
        "setup_s",
        "memory_plan",
        "error",
    )
    summary = {key: result.get(key) for key in keys}
    summary["steps"] = summary["steps"] or 0
    summary["finite_every_step"] = bool(result.get("finite_every_step"))
    summary["oom"] = bool(result.get("oom"))
    return summary


def run_child(
    name: str, job: dict[str, Any], tmp: Path, on_error: dict[str, Any]
) -> dict[str, Any]:
    """Run `--child name` on `job` in a fresh process; its result, or `on_error` with the exit code."""
    job_path, result = tmp / f"{name}.job.json", tmp / f"{name}.json"
    job_path.write_text(json.dumps(job))
    command = [sys.executable, __file__, "--child", name, "--job", str(job_path)]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    done = subprocess.run([*command, "--out", str(result)], env=env, check=False)
    if done.returncode != 0:
        return {"error": f"exit code {done.returncode}", **on_error}
    return json.loads(result.read_text())


def device_name(device: str) -> dict[str, Any]:
    """The card's name and memory (or the CPU)."""
    import torch

    if device != "cuda":
        return {"name": "cpu", "memory_mb": None}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_mb": round(props.total_memory / 2**20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "paper_scale.json")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {','.join(SHAPES)}")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--problems-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--reward-noise",
        type=float,
        default=0.1,
        help="N(0, sigma) added to every reward, so a random model's update runs (flagged)",
    )
    parser.add_argument("--cache-dir", type=Path, help="where random models are built once")
    parser.add_argument(
        "--comlrl",
        default="",
        help="shapes (of --shapes) on which CoMLRL's MAGRPOTrainer also runs, after ours (PyPI comlrl)",
    )
    parser.add_argument(
        "--comlrl-steps", type=int, default=3, help="CoMLRL's steps (the first warms up)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run our last step's generation and update under torch.profiler (tables in `profiles`)",
    )
    parser.add_argument(
        "--multi-gpu",
        choices=("", *SHAPES),
        default="",
        help="a shape (of --shapes) also trained in 1 and in 2 processes (multi_gpu.py) after the "
        "rest: writes multi_gpu_speedup_<shape> and the multi_gpu block",
    )
    parser.add_argument(
        "--multi-gpu-set",
        action="append",
        metavar="KEY=VALUE",
        help=f"params both --multi-gpu runs take (default: {' '.join(MULTI_GPU_SET)})",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = args.out.resolve()
    os.chdir(REPO)
    if args.child:
        run = run_comlrl_shape if args.child.startswith("comlrl-") else run_shape
        args.out.write_text(json.dumps(run(json.loads(args.job.read_text()))))
        return

    shapes = args.shapes.split(",")
    for shape in shapes:
        if shape not in SHAPES:
            raise SystemExit(f"--shapes: unknown {shape!r}; choose from {','.join(SHAPES)}")
    theirs = [s for s in args.comlrl.split(",") if s]
    for shape in theirs:
        if shape not in shapes:
            raise SystemExit(f"--comlrl: {shape!r} is not one of --shapes {args.shapes}")
    if args.multi_gpu and args.multi_gpu not in shapes:
        raise SystemExit(f"--multi-gpu: {args.multi_gpu!r} is not one of --shapes {args.shapes}")
    if args.multi_gpu and args.steps <= WARMUP_STEPS:
        raise SystemExit(f"--multi-gpu needs --steps above the {WARMUP_STEPS} warm-up steps")
    sets = args.multi_gpu_set or list(MULTI_GPU_SET)
    started = time.time()
    cache = args.cache_dir or Path(load_params(args.params).model.cache_dir)
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    report: dict[str, Any] = {}
    full: dict[str, Any] = {}
    multi_keys: dict[str, Any] = {}  # `--multi-gpu`'s, at the top level
    with tempfile.TemporaryDirectory(prefix="paper_scale-") as tmp:
        job = vs_comlrl.prepare_job(
            job_args(argparse.Namespace(**vars(args), model=None)), Path(tmp)
        )
        job["params"]["model"].update(device=args.device, dtype=dtype)
        job.update(device=args.device, dtype=dtype, reward_noise=args.reward_noise)
        job.update(profile=args.profile)
        job.update(cache_dir=str(Path(cache).resolve()))
        # a bad --multi-gpu-set fails here, not after the shapes
        multi_train = multi_gpu_params(job, sets).train if args.multi_gpu else None
        for shape in shapes:
            ours_job = {**job, "shape": shape, "variant": f"ours-{shape}"}
            full[shape] = run_child(shape, ours_job, Path(tmp), {"model": SHAPES[shape]})
            report[shape] = shape_summary(full[shape])
            if shape in theirs:
                plan = job["plan"][: args.comlrl_steps]
                theirs_job = {**job, "shape": shape, "variant": f"comlrl-{shape}", "plan": plan}
                full[f"comlrl-{shape}"] = run_child(f"comlrl-{shape}", theirs_job, Path(tmp), {})
                report[shape].update(comlrl_summary(report[shape], full[f"comlrl-{shape}"]))
            print(shape, json.dumps(report[shape]), flush=True)
        if multi_train is not None:
            runs, error = run_multi_gpu(job, full[args.multi_gpu].get("model_dir"), sets, Path(tmp))
            chosen = {
                "parallel": multi_train.parallel,
                "rollouts_ahead": multi_train.rollouts_ahead,
            }
            multi = multi_gpu_summary(args.multi_gpu, runs, {**chosen, "set": sets}, error)
            print("multi_gpu", json.dumps({k: v for k, v in multi.items() if k != "runs"}))
            multi_keys = {
                f"multi_gpu_speedup_{args.multi_gpu}": multi["speedup"],
                "multi_gpu": multi,
            }

    settings = {
        "shapes": shapes,
        "steps": args.steps,
        "warmup_steps": WARMUP_STEPS,
        "problems_per_step": args.problems_per_step,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "forced_new_tokens": args.max_new_tokens,
        "device": args.device,
        "dtype": dtype,
        "random_weights": True,
        # rewards with noise train on noise: the numbers are the speed of an update, nothing else
        "reward_noise": args.reward_noise,
        "plan": job["plan"],
        "comlrl_shapes": theirs,
        "comlrl_steps": args.comlrl_steps if theirs else 0,
        "profile": args.profile,
    }
    report = {
        "device": device_name(args.device),
        **report,
        **multi_keys,
        "settings": settings,
        "per_step": {
            shape: {k: r.get(k) for k in ("step_s", "generation_s", "update_s", "new_tokens")}
            for shape, r in full.items()
        },
        "profiles": {
            shape: {
                k: v
                for k, v in r.items()
                if k.startswith(("generation_", "update_"))
                and k.endswith(("_by_cuda", "_by_cpu", "_wall_s", "_kernel_s"))
            }
            for shape, r in full.items()
            if args.profile and not shape.startswith("comlrl-")
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, started)
    print_table(report, shapes)


def print_table(report: dict[str, Any], shapes: list[str]) -> None:
    device = report["device"]
    print(f"\n{device['name']} ({device['memory_mb']} MiB)")
    cols = ("steps", "finite_every_step", "oom", "peak_gpu_mb", "step_seconds", "update_seconds")
    cols += ("generation_tokens_per_s",)
    print(f"{'shape':<6}" + "".join(f"{c:>26}" for c in cols))
    for shape in shapes:
        row = report[shape]
        cells = [f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cols]
        print(f"{shape:<6}" + "".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
