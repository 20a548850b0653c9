"""One MAGRPO step on a GPU: our training loop, its phases, and CoMLRL's trainer on the same card.

Runs `--steps` steps of the real training loop (`orchestry.stages.train.train_loop`: rollout in the
tree, the level reward in the sandbox, one optimizer step per adapter) on the embedded SmolLM2-135M,
G samples per agent and problem, `--problems-per-step` problems a step, every completion forced to
`--max-new-tokens` (so every side does the same work), and times each phase: generation (the
policy's `generate` calls), the sandbox (the env's `score` calls) and the update (`update_agents`),
each between CUDA synchronisations. Each variant runs in a process of its own:

- `ours`: params.yaml with `model.device=cuda`, `model.dtype=bfloat16` and the sizes above, plus
  any `--set key=value` overrides (e.g. `--set train.microbatch=64`);
- `ours_warm`: the same again in a fresh process after `ours`, to show what a second stage process
  pays for compilation (the compile cache, where there is one, is shared);
- `ours_peft_update`: as `ours` with the update through peft, one forward and backward per adapter
  (the path before `agents/lora/cuda/written_update.py`), to compare in the same run;
- `ours_eager_update`: as `ours` with the written-out update run eagerly, not replayed from CUDA
  graphs (the path before `agents/lora/cuda/graph_update.py`);
- `ours_ahead1`, `ours_ahead2`, `ours_ahead4`: as `ours` with `train.rollouts_ahead` 1, 2 and 4
  (the next steps generated while worker threads score in the sandbox; `algos/rollout_queue.py`);
- `nf4`: as `ours` with `model.quantization=4bit` (bitsandbytes NF4 base, bf16 adapters);
- `comlrl`: CoMLRL's `MAGRPOTrainer` (benchmarks/vs_comlrl.py's side) on the same card, dtype,
  problems, prompts, reward, G and tokens.

    python benchmarks/gpu_step.py --out results/bench/gpu_step.json --variants ours,ours_warm,nf4,comlrl

Writes the step's medians over the steady steps (all but the first two, which compile, and with
`--profile` all but the last, which runs under torch.profiler), GPU utilisation sampled with
nvidia-smi every 100 ms over the steady steps, peak GPU memory, the warm-up steps' extra time
(compilation) and the ratio to CoMLRL. A variant whose packages are missing is recorded
with its error instead of numbers.
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import vs_comlrl  # noqa: E402
from timed_train import job_args, override, run_ours, summarize_ours  # noqa: E402

from orchestry.agents.lora.shapes import random_shape_folder  # noqa: E402
from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402
from orchestry.params import load_params, parse_params  # noqa: E402

VARIANTS = (
    "ours",
    "ours_warm",
    "ours_peft_update",
    "ours_eager_update",
    "ours_ahead1",
    "ours_ahead2",
    "ours_ahead4",
    "nf4",
    "comlrl",
)
AHEAD = {"ours_ahead1": 1, "ours_ahead2": 2, "ours_ahead4": 4}

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def run_comlrl(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    cuda = job["device"] == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    out = vs_comlrl.run_comlrl(job)
    steps = out["step_s"]
    out["step_seconds"] = statistics.median(steps[1:] or steps)
    out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    return out


def variant_params(base: dict[str, Any], variant: str) -> dict[str, Any]:
    data = json.loads(json.dumps(base))
    if variant in AHEAD:
        data["train"]["rollouts_ahead"] = AHEAD[variant]
    if variant == "nf4":
        data["model"]["quantization"] = "4bit"
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "gpu_step.json")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--problems-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--variants", default="ours,ours_warm,comlrl")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--model", help="a model folder or hub id (no embedded package needed)")
    parser.add_argument(
        "--shape", help="a named shape (qwen2.5-coder-3b, ...): its random model, built once"
    )
    parser.add_argument(
        "--reward-noise",
        type=float,
        default=0.0,
        help="N(0, sigma) added to every reward, so a random model's update runs (flagged)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="torch.profiler tables of the last update"
    )
    parser.add_argument(
        "--resummarize", type=Path, help="recompute the summaries of a written report and exit"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out = args.out.resolve()
    if args.resummarize:
        resummarize(args.resummarize.resolve())
        return
    os.chdir(REPO)
    if args.child:
        job = json.loads(args.job.read_text())
        run = run_comlrl if args.child == "comlrl" else run_ours
        args.out.write_text(json.dumps(run(job)))
        return

    if args.shape and args.model:
        raise SystemExit("--shape and --model both name the model: give one")
    if args.shape:
        cache = Path(load_params(args.params).model.cache_dir)
        args.model = str(random_shape_folder(args.shape, cache, args.device).resolve())
    vs_args = job_args(args)
    report: dict[str, Any] = {"variants": {}}
    with tempfile.TemporaryDirectory(prefix="gpu_step-") as tmp:
        job = vs_comlrl.prepare_job(vs_args, Path(tmp))
        data = job["params"]
        data["model"].update(device=args.device, dtype=args.dtype)
        if args.model:
            data["model"]["name"] = args.model
        override(data, args.set)
        parse_params(data, "params.yaml + gpu_step overrides")  # fail early on a bad --set
        job.update(device=args.device, dtype=args.dtype, profile=args.profile)
        job.update(reward_noise=args.reward_noise)
        for variant in args.variants.split(","):
            if variant not in VARIANTS:
                raise SystemExit(f"--variants: unknown {variant!r}; choose from {VARIANTS}")
            child_job = {**job, "params": variant_params(data, variant), "variant": variant}
            job_path = Path(tmp) / f"{variant}.job.json"
            job_path.write_text(json.dumps(child_job))
            result = Path(tmp) / f"{variant}.json"
            command = [sys.executable, __file__, "--child", variant, "--job", str(job_path)]
            env = {**os.environ, "WANDB_MODE": "disabled"}
            done = subprocess.run([*command, "--out", str(result)], env=env, check=False)
            if done.returncode != 0:
                report["variants"][variant] = {"error": f"exit code {done.returncode}"}
            else:
                report["variants"][variant] = json.loads(result.read_text())
            print(variant, json.dumps(report["variants"][variant]), flush=True)

    import torch

    report["device"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    report["settings"] = {
        "steps": args.steps,
        "problems_per_step": args.problems_per_step,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "forced_new_tokens": args.max_new_tokens,
        "set": args.set,
        "plan": job["plan"],
        "model": args.model,
        "shape": args.shape,
        "random_weights": bool(args.shape),
        # rewards with noise train on noise: the numbers are the speed of an update, nothing else
        "reward_noise": args.reward_noise,
    }
    report["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
    }
    write(report, args.out)


def write(report: dict[str, Any], out: Path) -> None:
    """The top-level keys from the variants' numbers, then the file."""
    ours = report["variants"].get("ours", {})
    theirs = report["variants"].get("comlrl", {})
    nf4 = report["variants"].get("nf4", {})
    warm = report["variants"].get("ours_warm", {})
    peft = report["variants"].get("ours_peft_update", {})
    eager = report["variants"].get("ours_eager_update", {})
    steps_ours, steps_theirs = ours.get("step_seconds"), theirs.get("step_seconds")
    report.update(
        step_seconds=steps_ours,
        generation_seconds=ours.get("generation_seconds"),
        sandbox_seconds=ours.get("sandbox_seconds"),
        update_seconds=ours.get("update_seconds"),
        generation_tokens_per_s=ours.get("generation_tokens_per_s"),
        gpu_util=ours.get("gpu_util"),
        peak_gpu_mb=ours.get("peak_gpu_mb"),
        compile_seconds=ours.get("compile_seconds"),
        compile_seconds_second_process=warm.get("compile_seconds"),
        warmup_step_excess_seconds=ours.get("warmup_step_excess_seconds"),
        mean_step_seconds=ours.get("mean_step_seconds"),
        comlrl_step_seconds=steps_theirs,
        ratio_vs_comlrl=steps_ours / steps_theirs if steps_ours and steps_theirs else None,
        gpu_util_by_phase=ours.get("gpu_util_by_phase"),
        peft_update_step_seconds=peft.get("step_seconds"),
        peft_update_seconds=peft.get("update_seconds"),
        peft_update_gpu_util=peft.get("gpu_util"),
        eager_update_step_seconds=eager.get("step_seconds"),
        eager_update_seconds=eager.get("update_seconds"),
        eager_update_gpu_util=eager.get("gpu_util"),
        eager_update_gpu_util_by_phase=eager.get("gpu_util_by_phase"),
        **{
            f"ahead{k}_{key}": report["variants"].get(f"ours_ahead{k}", {}).get(key)
            for k in AHEAD.values()
            for key in ("step_seconds", "mean_step_seconds", "gpu_util", "gpu_util_by_step")
        },
        nf4_step_seconds=nf4.get("step_seconds"),
        nf4_peak_gpu_mb=nf4.get("peak_gpu_mb"),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(out, __file__, sys.argv, STARTED)
    print(
        json.dumps({k: v for k, v in report.items() if k not in ("variants", "settings")}, indent=2)
    )


def resummarize(path: Path) -> None:
    """Recompute the summaries of a written report from its per-step numbers (no GPU needed)."""
    report = json.loads(path.read_text())
    for name, variant in report["variants"].items():
        if name != "comlrl" and "step_s" in variant:
            summarize_ours(variant)
    write(report, path)


if __name__ == "__main__":
    main()
