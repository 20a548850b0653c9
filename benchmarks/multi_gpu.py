"""Data-parallel training speed: the same global batch in one process and in W ranks, steps/s.

Runs `--steps` steps of the train stage's loop (`orchestry.stages.train.train_loop`: rollout in the
tree, the level reward in the sandbox, one optimizer step per adapter) on the embedded SmolLM2-135M
and the training split (data/prepared/train.jsonl) twice, with the same global batch
(`--problems-per-step` problems x `--group-size` samples per agent, the same plan of problems):

- world size 1: one plain process, no process group (the single-GPU code path);
- world size W (`--world`): W ranks started by `python -m torch.distributed.run` (NCCL on GPUs,
  gloo on a CPU); each rolls out its share of every step's problems and the update all-reduces the
  adapters' gradients (`orchestry.agents.lora.dist`).

`--shape` trains a random model of a named shape instead (the paper's is `qwen2.5-coder-3b`, built once
under `--cache-dir`); its rewards are all 0, so N(0, `--reward-noise`) is added (flagged in the
settings) and the update, the thing measured, runs on noise.

Every completion is forced to `--max-new-tokens` (`min_new_tokens`), so both runs do the same work.
A step's time is rank 0's wall clock from the rollout to the end of its bookkeeping (its wait for the
other ranks included); steps/s is 1 / the median over the steady steps, those after the first two
(which compile on a GPU; `timed_train.WARMUP_STEPS`).

    python benchmarks/multi_gpu.py --world 2                  # a 2-GPU machine: results/bench/multi_gpu.json
    python benchmarks/multi_gpu.py --world 2 --shape qwen2.5-coder-3b --out results/bench/multi_gpu_3b.json
    python benchmarks/multi_gpu.py --device cpu --dtype float32 --world 2 --steps 3 \
        --problems-per-step 2 --group-size 2 --max-new-tokens 16 --out /tmp/multi_gpu_cpu.json
    python benchmarks/multi_gpu.py --world 2 --shape qwen2.5-coder-3b --set train.parallel=pipeline \
        --set train.rollouts_ahead=1 --out results/bench/multi_gpu_3b_pipeline.json

With `--set train.parallel=pipeline` (and `train.rollouts_ahead` >= 1) rank 1 generates every step
while rank 0 updates (`orchestry/stages/train_pipeline.py`); the one-process run takes the same
`--set`, so both run the same algorithm (rollouts one update old).

Writes the device names, world sizes, step seconds, steps/s, the speed-up (steps/s at W over steps/s
at 1), each rank's median seconds in generation, the sandbox and the update, and the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import vs_comlrl  # noqa: E402
from timed_train import WARMUP_STEPS, add_reward_noise, job_args, override  # noqa: E402

from orchestry.agents.lora.dist import LAUNCHER_KEYS  # noqa: E402
from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402
from orchestry.params import parse_params  # noqa: E402

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def device_name(device: str) -> str:
    """This rank's GPU (torch.cuda.get_device_name), or the CPU model from /proc/cpuinfo."""
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(torch.cuda.current_device())
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "cpu"


def time_phases(train: Any, policy: Any, env: Any, sync: Any) -> dict[str, list[float]]:
    """Each call's seconds in generation, the sandbox and the update on this rank (a call a step
    with `train.turns: 1`). Generation and the update are timed between device syncs; the sandbox
    without (it runs no GPU work and, with rollouts ahead, on a worker thread beside a generation)."""
    phases: dict[str, list[float]] = {"generation": [], "sandbox": [], "update": []}

    def timed_calls(fn: Any, clock: list[float], sync: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            sync()
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync()
                clock.append(time.perf_counter() - start)

        return wrapper

    policy.generate = timed_calls(policy.generate, phases["generation"], sync)
    env.score = timed_calls(env.score, phases["sandbox"], lambda: None)
    train.update_agents = timed_calls(train.update_agents, phases["update"], sync)
    return phases


def steady(values: list[float], tail: int = 0) -> list[float]:
    """The values after the warm-up steps and before the last `tail` (with rollouts ahead, the last
    k steps only update: their rollouts were generated during earlier steps)."""
    end = len(values) - tail if len(values) - WARMUP_STEPS > tail else len(values)
    return values[WARMUP_STEPS:end]


def steady_median(values: list[float], tail: int = 0) -> float:
    return statistics.median(steady(values, tail))


def run_rank(job: dict[str, Any]) -> dict[str, Any] | None:
    """One rank (or the one process) of a run: the real train loop; rank 0 returns the numbers."""
    import torch

    import orchestry.stages.train as train
    from orchestry import paths
    from orchestry.agents.lora.dist import end_world, start_world
    from orchestry.envs.code.problems import read_problems
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec, seed_everything
    from orchestry.stages.train_from_params import loop_settings

    params = parse_params(job["params"], "params.yaml + multi_gpu overrides")
    world = start_world(job["device"])
    try:
        seed_everything(params.seed)
        start = time.perf_counter()
        policy, env = make_policy(params), make_env(params)
        setup_s = time.perf_counter() - start
        if job.get("reward_noise"):  # a random model's rewards are all 0: no update without it
            add_reward_noise(env, job["reward_noise"], params.seed + world.rank)
        if job["min_new_tokens"]:  # train.py has no option for it: patch the spec it builds
            train.sampling_spec = lambda p: replace(
                sampling_spec(p), min_new_tokens=job["min_new_tokens"]
            )
        sync = torch.cuda.synchronize if job["device"] == "cuda" else (lambda: None)
        phases = time_phases(train, policy, env, sync)
        problems = read_problems(paths.split("train"))
        rollouts = Path(job["workdir"]) / f"rollouts-world{world.size}-rank{world.rank}.jsonl"
        history = train.train_loop(
            loop_settings(params), policy, env, problems, job["plan"], rollouts, None, world=world
        )
        names = world.gather(device_name(job["device"]))
        # a pipeline's ranks each do part of the work (`train.parallel: pipeline`): None for the rest
        rank_phases = world.gather({k: steady_median(v) if v else None for k, v in phases.items()})
        ahead = params.train.rollouts_ahead
    finally:
        end_world(world)
    if not world.is_main:
        return None
    steps = [h["step_seconds"] for h in history]
    step_seconds = steady_median(steps, ahead)
    return {
        "world_size": world.size,
        "devices": names,
        "setup_s": setup_s,
        "step_s": steps,
        "steady_steps": len(steady(steps, ahead)),
        "rollouts_ahead": ahead,
        "step_seconds": step_seconds,
        "steps_per_s": 1.0 / step_seconds,
        "tokens_per_s": steady_median([h["tokens_per_s"] for h in history], ahead),
        # each rank's steady medians: where a speed-up below W goes (e.g. generation that is
        # launch-bound, so half the rows take nearly the time of all of them)
        "phase_seconds_by_rank": rank_phases,
        "return_mean": [h["return_mean"] for h in history],
    }


def launch(world: int, job_path: Path, result: Path) -> None:
    """Run one world size in fresh processes: a plain process for 1, torch.distributed.run for more."""
    env = {k: v for k, v in os.environ.items() if k not in (*LAUNCHER_KEYS, "LOCAL_WORLD_SIZE")}
    script = [__file__, "--child", "--job", str(job_path), "--out", str(result)]
    if world == 1:
        command = [sys.executable, *script]
    else:
        # each rank gets its share of the cores (torchrun would give every rank 1 thread)
        env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // world)))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={world}", *script]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "multi_gpu.json")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--world", type=int, default=2, help="ranks of the data-parallel run")
    parser.add_argument("--steps", type=int, default=6, help="steps per run, 2 of them warm-up")
    parser.add_argument("--problems-per-step", type=int, default=8, help="the global batch")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--shape",
        help="train a random model of this shape (orchestry/agents/lora/shapes.py, e.g. "
        "qwen2.5-coder-3b) instead of the embedded one, built once under --cache-dir",
    )
    parser.add_argument("--cache-dir", type=Path, default=REPO / "cache" / "models")
    parser.add_argument(
        "--reward-noise",
        type=float,
        help="N(0, sigma) added to every reward (default 0.1 with --shape, else 0), so a random "
        "model's update runs (flagged in the settings)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = args.out.resolve()
    os.chdir(REPO)  # the stages read data/ and cache/ relative to the repository
    if args.child:
        result = run_rank(json.loads(args.job.read_text()))
        if result is not None:
            args.out.write_text(json.dumps(result))
        return
    if args.steps <= WARMUP_STEPS:
        parser.error(f"--steps must be more than the {WARMUP_STEPS} warm-up steps")
    if not 2 <= args.world <= args.problems_per_step:
        parser.error("--world must be at least 2 and at most --problems-per-step")
    if args.device == "cuda":
        import torch

        if torch.cuda.device_count() < args.world:
            parser.error(
                f"--world {args.world} needs {args.world} GPUs, this machine has "
                f"{torch.cuda.device_count()}"
            )

    noise = args.reward_noise if args.reward_noise is not None else 0.1 if args.shape else 0.0
    vs_args = job_args(argparse.Namespace(**vars(args), model=None))
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="multi_gpu-") as tmp:
        job = vs_comlrl.prepare_job(vs_args, Path(tmp))
        job["params"]["model"].update(device=args.device, dtype=args.dtype)
        override(job["params"], args.set)
        parse_params(job["params"], "params.yaml + multi_gpu overrides")  # fail early on a --set
        if args.shape:
            from orchestry.agents.lora.shapes import random_shape_folder

            folder = random_shape_folder(args.shape, args.cache_dir, args.device)
            if args.device == "cuda":
                torch.cuda.empty_cache()  # the ranks get the whole cards
            job["params"]["model"]["name"] = str(folder.resolve())
        job["device"] = args.device
        job["reward_noise"] = noise
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        for world in (1, args.world):
            result = Path(tmp) / f"world{world}.json"
            launch(world, job_path, result)
            runs[str(world)] = json.loads(result.read_text())
            print(f"world {world}:", json.dumps(runs[str(world)]), flush=True)

    import torch

    one, many = runs["1"], runs[str(args.world)]
    report = {
        "world_sizes": [1, args.world],
        "devices": {w: r["devices"] for w, r in runs.items()},
        "step_seconds": {w: r["step_seconds"] for w, r in runs.items()},
        "steps_per_s": {w: r["steps_per_s"] for w, r in runs.items()},
        "speedup": many["steps_per_s"] / one["steps_per_s"],
        "runs": runs,
        "settings": {
            "steps": args.steps,
            "warmup_steps": WARMUP_STEPS,
            "problems_per_step": args.problems_per_step,
            "group_size": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "forced_new_tokens": args.max_new_tokens,
            "device": args.device,
            "dtype": args.dtype,
            "set": args.set,
            "shape": args.shape,
            # rewards with noise train on noise: the numbers are the speed of an update, nothing else
            "reward_noise": noise,
            "plan": job["plan"],
        },
        "machine": {
            "platform": platform.platform(),
            "cpus": len(os.sched_getaffinity(0)),
            "torch": torch.__version__,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)
    print(json.dumps({k: report[k] for k in ("devices", "step_seconds", "steps_per_s", "speedup")}))


if __name__ == "__main__":
    main()
