"""Our training loop with each phase timed: the pieces the GPU benchmarks share.

`run_ours` runs the real loop (`orchestry.stages.train.train_loop`) from a job (params, plan of
problems, forced new tokens, reward noise) and times generation, the sandbox and the update of each
step between device synchronisations; `summarize_ours` takes the medians over the steady steps.
Used by `gpu_step.py` (variants of one setting, CoMLRL beside), `paper_scale.py` (the paper's model
shapes at defaults) and `multi_gpu.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestry.params import parse_params


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
    from orchestry.stages.train_from_params import loop_settings

    params = parse_params(job["params"], "params.yaml + gpu_step overrides")
    seed_everything(params.seed)
    start = time.perf_counter()
    policy = make_policy(params)
    env = make_env(params)
    setup_s = time.perf_counter() - start
    if job.get("reward_noise"):
        add_reward_noise(env, job["reward_noise"], params.seed)
    cuda = job["device"] == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    phases: dict[str, list[float]] = {"generation": [], "sandbox": [], "update": []}
    tokens: list[int] = []
    generate = policy.generate

    profiles: dict[str, Any] = {}

    def counted_generate(requests, sampling):
        if job.get("profile") and len(phases["generation"]) == len(job["plan"]):
            out = profiled(lambda: generate(requests, sampling), "generation", profiles, cuda)
        else:
            out = generate(requests, sampling)
        tokens[-1] += sum(g.new_tokens for g in out)
        return out

    update_agents = train.update_agents

    def update_profiled(*args: Any, **kwargs: Any) -> Any:
        """The last step's update under torch.profiler when the job asks for it."""
        if not job.get("profile") or len(phases["update"]) < len(job["plan"]):
            return update_agents(*args, **kwargs)
        return profiled(lambda: update_agents(*args, **kwargs), "update", profiles, cuda)

    if job["variant"] == "ours_peft_update":
        policy.update_path = "peft"
    if job["variant"] == "ours_eager_update":
        from orchestry.agents.lora.cuda import graph_update

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
    history = train.train_loop(
        loop_settings(params), policy, env, problems, job["plan"], rollouts, None
    )
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
    # each step's pre-clipping gradient norm per adapter (absent where a step had no update)
    out["grad_norms"] = [
        {k.removeprefix("grad_norm/"): v for k, v in h.items() if k.startswith("grad_norm/")}
        for h in history
    ]
    out["profiled_last_step"] = bool(last)
    # with rollouts ahead the last steps only update: their rollouts were generated before
    out["ahead_tail_steps"] = params.train.rollouts_ahead
    out.update(profiles)
    return summarize_ours(out)


def profiled(call: Callable[[], Any], name: str, profiles: dict[str, Any], cuda: bool) -> Any:
    """`call()` under torch.profiler; its tables and GPU-busy share go to `profiles[name_...]`.

    `<name>_by_cuda` and `<name>_by_cpu`: the 25 costliest operators by GPU and by own CPU time;
    `<name>_wall_s` and `<name>_kernel_s`: the call's wall time and the summed time of its GPU
    kernels (kernels of replayed CUDA graphs included), so their ratio says whether the GPU was
    kept busy or waited on the host.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        result = call()
        sync()
    profiles[f"{name}_wall_s"] = time.perf_counter() - start
    table = prof.key_averages()
    if cuda:
        profiles[f"{name}_by_cuda"] = table.table(sort_by="cuda_time_total", row_limit=25)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        profiles[f"{name}_kernel_s"] = sum(e.time_range.elapsed_us() for e in kernels) / 1e6
    profiles[f"{name}_by_cpu"] = table.table(sort_by="self_cpu_time_total", row_limit=25)
    return result


def add_reward_noise(env: Any, sigma: float, seed: int) -> None:
    """Every outcome's total plus N(0, sigma) noise (seeded): a random model's rewards are all 0,
    so without it no group has an advantage and the update, the thing measured, is skipped."""
    import random

    rng, score = random.Random(seed), env.score

    def noisy(batch: Any) -> Any:
        return [replace(o, total=o.total + rng.gauss(0.0, sigma)) for o in score(batch)]

    env.score = noisy


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


def job_args(args: argparse.Namespace) -> argparse.Namespace:
    """The settings `vs_comlrl.prepare_job` takes, every completion forced to --max-new-tokens."""
    return argparse.Namespace(
        params=args.params,
        steps=args.steps,
        problems_per_step=args.problems_per_step,
        group_size=args.group_size,
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.max_new_tokens,
        model=args.model,
    )
