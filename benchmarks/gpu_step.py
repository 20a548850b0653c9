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
  (the path before `agents/lora/written_update.py`), to compare in the same run;
- `ours_eager_update`: as `ours` with the written-out update run eagerly, not replayed from CUDA
  graphs (the path before `agents/lora/graph_update.py`);
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
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import vs_comlrl  # noqa: E402

from orchestry.params import parse_params  # noqa: E402
from orchestry.provenance import write_bench_manifest  # noqa: E402

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


class UtilSampler:
    """GPU utilisation (0-100) from `nvidia-smi -lms 100`, timestamped, in a background thread."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self.proc = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
                "-lms",
                "100",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.samples.append((time.perf_counter(), float(line.split(",")[0])))
            except ValueError:
                continue

    def mean(self, start: float, end: float) -> float | None:
        window = [u for t, u in self.samples if start <= t <= end]
        return statistics.fmean(window) / 100 if window else None

    def mean_within(self, spans: list[tuple[float, float]], start: float, end: float):
        """The mean over the samples inside `spans` (clipped to start..end), or None."""
        window = [
            u for t, u in self.samples if start <= t <= end and any(a <= t <= b for a, b in spans)
        ]
        return statistics.fmean(window) / 100 if window else None

    def stop(self) -> None:
        self.proc.terminate()


def timed(
    fn,
    clock: list[float],
    sync,
    spans: list[tuple[float, float]] | None = None,
    step=lambda: -1,
):
    """`fn` wrapped so that each call adds its wall time (between device syncs) to clock[step()]
    (the last step's entry unless told) and its (start, end) to `spans`."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sync()
        index = step()
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sync()
            end = time.perf_counter()
            clock[index] += end - start
            if spans is not None:
                spans.append((start, end))

    return wrapper


def run_ours(job: dict[str, Any]) -> dict[str, Any]:
    """Our train loop with each phase timed, one list entry per step."""
    import torch

    import orchestry.stages.train as train
    from orchestry import paths
    from orchestry.envs.code.problems import read_problems
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec, seed_everything

    params = parse_params(job["params"], "params.yaml + gpu_step overrides")
    seed_everything(params.seed)
    start = time.perf_counter()
    policy = make_policy(params)
    env = make_env(params)
    setup_s = time.perf_counter() - start
    cuda = job["device"] == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    phases: dict[str, list[float]] = {"generation": [], "sandbox": [], "update": []}
    tokens: list[int] = []
    generate = policy.generate

    def counted_generate(requests, sampling):
        out = generate(requests, sampling)
        tokens[-1] += sum(g.new_tokens for g in out)
        return out

    profiles: dict[str, str] = {}
    update_agents = train.update_agents

    def update_profiled(*args: Any, **kwargs: Any) -> Any:
        """The last step's update under torch.profiler when the job asks for it."""
        if not job.get("profile") or len(phases["update"]) < len(job["plan"]):
            return update_agents(*args, **kwargs)
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
        with profile(activities=activities) as prof:
            result = update_agents(*args, **kwargs)
            sync()
        table = prof.key_averages()
        if cuda:
            profiles["update_by_cuda"] = table.table(sort_by="cuda_time_total", row_limit=25)
        profiles["update_by_cpu"] = table.table(sort_by="self_cpu_time_total", row_limit=25)
        return result

    if job["variant"] == "ours_peft_update":
        policy.update_path = "peft"
    if job["variant"] == "ours_eager_update":
        from orchestry.agents.lora import graph_update

        graph_update.RECORD = False
    spans: dict[str, list[tuple[float, float]]] = {name: [] for name in phases}
    policy.generate = timed(counted_generate, phases["generation"], sync, spans["generation"])
    # the sandbox runs no GPU work and, with rollouts ahead, on a worker thread while a later
    # step generates: no sync, and its time goes to the step whose rollout it scores
    scoring = threading.local()
    env.score = timed(
        env.score,
        phases["sandbox"],
        lambda: None,
        spans["sandbox"],
        lambda: getattr(scoring, "step", -1),
    )
    train.update_agents = timed(update_profiled, phases["update"], sync, spans["update"])
    if job["min_new_tokens"]:
        train.sampling_spec = lambda p: replace(
            sampling_spec(p), min_new_tokens=job["min_new_tokens"]
        )
    marks: list[float] = []
    original_start = train.start_rollout

    def start_rollout(*args: Any, **kwargs: Any) -> Any:  # a new step's generation begins
        for clock in (*phases.values(), tokens):
            clock.append(0.0 if clock is not tokens else 0)
        marks.append(time.perf_counter())
        index = len(marks) - 1
        started = original_start(*args, **kwargs)
        finish = started.finish

        def finish_of_step() -> Any:
            scoring.step = index
            return finish()

        started.finish = finish_of_step
        return started

    train.start_rollout = start_rollout
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sampler = UtilSampler() if cuda else None
    problems = read_problems(paths.split("train"))
    rollouts = Path(job["workdir"]) / f"rollouts-{job['variant']}.jsonl"
    history = train.train_loop(params, policy, env, problems, job["plan"], rollouts, None)
    sync()
    end = time.perf_counter()
    if sampler:
        sampler.stop()
    steps = [h["step_seconds"] for h in history]
    last = -1 if job.get("profile") and len(steps) > WARMUP_STEPS + 1 else None
    first = marks[min(WARMUP_STEPS, len(marks) - 1)]
    # the steady window ends where the last step's generation begins when that step is profiled
    # or, with rollouts ahead, when the steps after it only update (their generation came before)
    stop = marks[-1] if last or params.train.rollouts_ahead else end
    out = {
        "setup_s": setup_s,
        "step_s": steps,
        **{f"{name}_s": clock for name, clock in phases.items()},
        "new_tokens": tokens,
        "gpu_util": sampler.mean(first, stop) if sampler else None,
        # each step's own mean: a step whose sandbox waits on a timed-out program idles the GPU
        "gpu_util_by_step": [
            sampler.mean(a, b) if sampler else None
            for a, b in zip(marks, [*marks[1:], end], strict=True)
        ],
        # nvidia-smi's figure is itself an average over its last sample period: phases blur a little
        "gpu_util_by_phase": {
            name: sampler.mean_within(spans[name], first, stop) for name in phases
        }
        if sampler
        else None,
        "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        "peak_gpu_reserved_mb": torch.cuda.max_memory_reserved() / 2**20 if cuda else None,
    }
    out["profiled_last_step"] = bool(last)
    # with rollouts ahead the last steps only update: their rollouts were generated before
    out["ahead_tail_steps"] = params.train.rollouts_ahead
    out.update(profiles)
    return summarize_ours(out)


WARMUP_STEPS = 2
"""Steps counted as warm-up (graph capture for the first shapes; with `transformers`' compiled
static cache they took 138 s and 44 s on an H100); later steps are the steady ones."""


def summarize_ours(out: dict[str, Any]) -> dict[str, Any]:
    """Medians over the steady steps (after the warm-up, without a profiled last step)."""
    steps = out["step_s"]
    warm = WARMUP_STEPS if len(steps) > WARMUP_STEPS else min(1, len(steps) - 1)
    tail = out.get("ahead_tail_steps", 0) + bool(out.get("profiled_last_step"))
    end = -tail if tail and len(steps) - warm > tail else None
    steady = slice(warm, end)
    out["steady_steps"] = len(steps[steady])
    out["step_seconds"] = statistics.median(steps[steady])
    for name in ("generation", "sandbox", "update"):
        out[f"{name}_seconds"] = statistics.median(out[f"{name}_s"][steady])
    gen = out["generation_seconds"]
    out["generation_tokens_per_s"] = statistics.median(out["new_tokens"][steady]) / gen
    # Compilation and graph capture happen in the GPU phases: their excess in the warm-up steps
    # over the steady medians. The whole steps' excess also holds the sandbox's first steps,
    # where a program that runs into its timeout (5 s) costs the same in any step.
    gpu = [g + u for g, u in zip(out["generation_s"], out["update_s"], strict=True)]
    out["compile_seconds"] = sum(gpu[:warm]) - warm * statistics.median(gpu[steady])
    out["warmup_step_excess_seconds"] = sum(steps[:warm]) - warm * out["step_seconds"]
    out["mean_step_seconds"] = statistics.fmean(steps[steady])
    return out


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


def override(data: dict[str, Any], assignments: list[str]) -> None:
    """Apply `section.key=value` (value parsed as JSON when it parses, else a string)."""
    for item in assignments:
        key, _, text = item.partition("=")
        *path, last = key.split(".")
        node = data
        for part in path:
            node = node[part]
        if last not in node:
            raise SystemExit(f"--set {item}: no key {key!r} in params.yaml")
        try:
            node[last] = json.loads(text)
        except json.JSONDecodeError:
            node[last] = text


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

    vs_args = job_args(args)
    report: dict[str, Any] = {"variants": {}}
    with tempfile.TemporaryDirectory(prefix="gpu_step-") as tmp:
        job = vs_comlrl.prepare_job(vs_args, Path(tmp))
        data = job["params"]
        data["model"].update(device=args.device, dtype=args.dtype)
        override(data, args.set)
        parse_params(data, "params.yaml + gpu_step overrides")  # fail early on a bad --set
        job.update(device=args.device, dtype=args.dtype, profile=args.profile)
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
    }
    report["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
    }
    write(report, args.out)


def job_args(args: argparse.Namespace) -> argparse.Namespace:
    """The settings `vs_comlrl.prepare_job` takes, every completion forced to --max-new-tokens."""
    return argparse.Namespace(
        params=args.params,
        steps=args.steps,
        problems_per_step=args.problems_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.max_new_tokens,
    )


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
