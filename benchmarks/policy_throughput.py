"""Rollout throughput and memory: our TeamPolicy versus the published MAGRPO code's way.

Ours: one frozen base model + one LoRA adapter per agent; all agents x problems x G samples in one
batched call: eager `generate` with mixed adapters (eager), our decode loop replayed as a CUDA graph
with mixed adapters (graph), or one static-cache, compiled `generate` per adapter (static).
Published way: one full model per agent (two full copies), eager `generate` per agent and per
problem with `num_return_sequences=G`.

Both sample exactly --max-new-tokens tokens per completion (min_new_tokens = max_new_tokens), so
they do the same work. Peak resident memory (VmHWM) of each setup is read in its own subprocess
after loading, after one rollout and after one training step (log-probs with gradient + AdamW).

    python benchmarks/policy_throughput.py --out results/bench/policy_throughput.json
    python benchmarks/policy_throughput.py --out cuda.json --device cuda --dtype bfloat16 \
        --paths eager,graph,static,published

Prints a table and writes JSON to --out. This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from peft import __version__ as peft_version
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from orchestry.agents.base import GenRequest, SamplingSpec
from orchestry.agents.lora.base_model import ModelSpec, load_base_model
from orchestry.agents.lora.team import TeamPolicy
from orchestry.bookkeeping.provenance import write_bench_manifest
from orchestry.params import Params
from orchestry.stages.from_params import lora_spec

OURS = ("eager", "graph", "static")
"""Our generation paths (orchestry.agents.lora.generation.PATHS)."""
AGENTS = ("aux", "main")
PROBLEMS = (
    "Write a function that returns the n-th Fibonacci number.",
    "Write a function that checks whether a string is a palindrome, ignoring case and spaces.",
    "Write a function that returns the prime factors of an integer in increasing order.",
    "Write a function that merges two sorted lists into one sorted list.",
    "Write a function that counts how often each word occurs in a text.",
    "Write a function that converts a Roman numeral to an integer.",
    "Write a function that returns the longest common prefix of a list of strings.",
    "Write a function that rotates a matrix by 90 degrees clockwise.",
)
ROLES = {
    "aux": "You are the helper. Write only a Python function named aux for the main function.",
    "main": "You are the main agent. Write the requested Python function; you may call aux(...).",
}

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


LORA = lora_spec(Params())  # the default params' LoRA settings


def messages(problem: str, agent: str) -> list[dict[str, str]]:
    """The chat prompt of one agent for one problem."""
    return [{"role": "system", "content": ROLES[agent]}, {"role": "user", "content": problem}]


def peak_rss_mb() -> float:
    """Peak resident set size of this process (VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM line in /proc/self/status")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cut_at_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


# --------------------------------------------------------------------------- the two setups


def team_rollout(
    policy: TeamPolicy, problems: list[str], group: int, sampling: SamplingSpec, path: str
) -> tuple[list[list[int]], list[list[list[int]]], int]:
    """One rollout step with our policy; returns prompts, completions per request, token count."""
    requests = [GenRequest(a, messages(p, a), group) for p in problems for a in AGENTS]
    gens = policy.generate(requests, sampling, path=path)
    return (
        [g.prompt_ids for g in gens],
        [g.token_ids for g in gens],
        sum(g.new_tokens for g in gens),
    )


def published_rollout(
    models: dict[str, PreTrainedModel],
    tokenizer: PreTrainedTokenizerBase,
    problems: list[str],
    group: int,
    sampling: SamplingSpec,
) -> tuple[list[list[int]], list[list[list[int]]], int]:
    """The published way: eager generate per agent and per problem, G samples each."""
    prompts, completions, tokens = [], [], 0
    for problem in problems:
        for agent in AGENTS:
            model = models[agent]
            text = tokenizer.apply_chat_template(
                messages(problem, agent), tokenize=False, add_generation_prompt=True
            )
            ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                out = model.generate(
                    input_ids=ids.to(model.device),
                    attention_mask=torch.ones_like(ids).to(model.device),
                    do_sample=sampling.do_sample,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                    max_new_tokens=sampling.max_new_tokens,
                    min_new_tokens=sampling.min_new_tokens,
                    num_return_sequences=group,
                    pad_token_id=tokenizer.pad_token_id,
                )
            rows = [cut_at_eos(r, tokenizer.eos_token_id) for r in out[:, ids.shape[1] :].tolist()]
            prompts.append(ids[0].tolist())
            completions.append(rows)
            tokens += sum(map(len, rows))
    return prompts, completions, tokens


def full_model_logprobs(
    model: PreTrainedModel, prompt: list[int], rows: list[list[int]]
) -> torch.Tensor:
    """Sum log-prob of each completion of one prompt under a full model (published-way training)."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), len(prompt) + width), 0, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(prompt) + len(row)] = torch.tensor(prompt + row)
        mask[i, : len(prompt) + len(row)] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, len(prompt) - 1 : -1].float()
    targets = ids[:, len(prompt) :]
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return ((chosen - torch.logsumexp(logits, -1)) * mask[:, len(prompt) :]).sum(-1)


# --------------------------------------------------------------------------- measurements


def time_paths(args: argparse.Namespace, spec: ModelSpec, sampling: SamplingSpec) -> dict[str, Any]:
    """Tokens/s of each requested path, after one warm-up call each."""
    problems = list(PROBLEMS[: args.problems])
    device = torch.device("cuda" if spec.device != "cpu" and torch.cuda.is_available() else "cpu")
    results: dict[str, Any] = {}
    ours = [p for p in args.paths if p in OURS]
    if ours:
        policy = TeamPolicy(spec, AGENTS, LORA, seed=0)
        for path in ours:
            calls = len(AGENTS) if path == "static" else 1
            start = time.perf_counter()
            team_rollout(policy, problems, args.group_size, sampling, path)
            warmup = time.perf_counter() - start
            results[f"team_{path}"] = measure(
                lambda path=path: team_rollout(policy, problems, args.group_size, sampling, path)[
                    2
                ],
                args.repeats,
                device,
                calls * sampling.max_new_tokens,
                warmup,
            )
            print(f"team_{path}: {results[f'team_{path}']}", flush=True)
        del policy
    if "published" in args.paths:
        loaded = {a: load_base_model(spec) for a in AGENTS}
        models = {a: m for a, (m, _) in loaded.items()}
        tokenizer = loaded[AGENTS[0]][1]
        start = time.perf_counter()
        published_rollout(models, tokenizer, problems[:1], args.group_size, sampling)
        warmup = time.perf_counter() - start
        results["published"] = measure(
            lambda: published_rollout(models, tokenizer, problems, args.group_size, sampling)[2],
            args.repeats,
            device,
            len(AGENTS) * len(problems) * sampling.max_new_tokens,
            warmup,
        )
        print(f"published: {results['published']}", flush=True)
    return results


def measure(step: Any, repeats: int, device: torch.device, steps: int, warmup: float) -> dict:
    """Run `step` (returns generated tokens) `repeats` times; the upper median run's tokens/s and
    ms per step (with 2 repeats: the faster run, for every path alike)."""
    runs = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        tokens = step()
        synchronize(device)
        runs.append((time.perf_counter() - start, tokens))
    runs.sort(key=lambda r: r[1] / r[0])
    seconds, tokens = runs[len(runs) // 2]
    return {
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "tokens_per_s": round(tokens / seconds, 2),
        "ms_per_decode_step": round(1000 * seconds / steps, 3),
        "warmup_seconds": round(warmup, 3),
        "all_tokens_per_s": [round(t / s, 2) for s, t in runs],
    }


def rss_child(args: argparse.Namespace, spec: ModelSpec, sampling: SamplingSpec) -> None:
    """In a fresh process: load one setup, roll out once, train once; print peak memory."""
    problems = list(PROBLEMS[: args.problems])
    cuda = spec.device != "cpu" and torch.cuda.is_available()
    marks: dict[str, float] = {"start_mb": peak_rss_mb()}

    def mark(name: str) -> None:
        marks[f"{name}_mb"] = round(peak_rss_mb(), 1)
        if cuda:
            marks[f"{name}_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)

    # "load" is read after a one-token forward, so that lazily mapped weights are resident.
    one_token = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=1, do_sample=False)
    if args.rss_child == "team":
        policy = TeamPolicy(spec, AGENTS, LORA, seed=0)
        team_rollout(policy, problems[:1], 1, one_token, False)
        mark("load")
        prompts, completions, _ = team_rollout(policy, problems, args.group_size, sampling, False)
        mark("rollout")
        # The same micro-batch as the published way below: the G completions of one problem.
        for k, agent in enumerate(AGENTS):
            optimizer = torch.optim.AdamW(policy.trainable_parameters(agent), lr=1e-5)
            for i in range(k, len(prompts), len(AGENTS)):
                rows_p = [prompts[i]] * len(completions[i])
                logprob, _ = policy.sequence_logprobs(agent, rows_p, completions[i], grad=True)
                (-logprob.mean()).backward()
            optimizer.step()
        mark("train_step")
    else:
        loaded = {a: load_base_model(spec) for a in AGENTS}
        models = {a: m for a, (m, _) in loaded.items()}
        published_rollout(models, loaded[AGENTS[0]][1], problems[:1], 1, one_token)
        mark("load")
        prompts, completions, _ = published_rollout(
            models, loaded[AGENTS[0]][1], problems, args.group_size, sampling
        )
        mark("rollout")
        for k, agent in enumerate(AGENTS):
            model = models[agent]
            model.train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
            for i in range(k, len(prompts), len(AGENTS)):
                (-full_model_logprobs(model, prompts[i], completions[i]).mean()).backward()
            optimizer.step()
        mark("train_step")
    print("RSS " + json.dumps(marks), flush=True)


def measure_rss(args: argparse.Namespace) -> dict[str, Any]:
    """Peak memory of each setup, each in its own subprocess so peaks don't mix."""
    out = {}
    for setup in ("team", "published"):
        command = [sys.executable, __file__, *sys.argv[1:], "--rss-child", setup]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        lines = [x for x in done.stdout.splitlines() if x.startswith("RSS ")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(
                f"RSS child {setup} failed ({done.returncode}):\n{done.stderr[-3000:]}"
            )
        out[setup] = json.loads(lines[-1][4:])
        print(f"rss {setup}: {out[setup]}", flush=True)
    for phase in ("load", "rollout", "train_step"):
        for unit in ("mb", "gpu_mb"):
            key = f"{phase}_{unit}"
            if key in out["team"]:
                out[f"ratio_{key}"] = round(out["team"][key] / out["published"][key], 3)
        # Above the interpreter + torch baseline (start_mb) that both processes pay alike.
        team, published = (
            out[s][f"{phase}_mb"] - out[s]["start_mb"] for s in ("team", "published")
        )
        out[f"ratio_{phase}_above_start_mb"] = round(team / published, 3)
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache-dir", default="cache/models")
    parser.add_argument("--problems", type=int, default=4, help="problems per step (<= 8)")
    parser.add_argument("--group-size", type=int, default=4, help="G samples per agent and problem")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--paths", default="eager,published", help=f"of {', '.join(OURS)}, published"
    )
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--rss-child", choices=("team", "published"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.paths = [p for p in args.paths.split(",") if p]
    if not set(args.paths) <= {*OURS, "published"} or args.problems > len(PROBLEMS):
        parser.error(f"--paths must name {OURS} or published; --problems <= {len(PROBLEMS)}")
    return args


def main() -> None:
    args = parse_args()
    spec = ModelSpec(
        name=args.model,
        dtype=args.dtype,
        device=args.device,
        quantization="none",
        cache_dir=args.cache_dir,
    )
    n = args.max_new_tokens
    sampling = SamplingSpec(
        max_new_tokens=n, min_new_tokens=n, temperature=0.8, top_p=0.95, top_k=0
    )
    if args.rss_child:
        rss_child(args, spec, sampling)
        return
    report: dict[str, Any] = {
        "settings": {
            "model": args.model,
            "dtype": args.dtype,
            "device": args.device,
            "agents": len(AGENTS),
            "problems": args.problems,
            "group_size": args.group_size,
            "max_new_tokens": n,
            "repeats": args.repeats,
        },
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft_version,
            "load_average": os.getloadavg(),
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report["paths"] = time_paths(args, spec, sampling)
    baseline = report["paths"].get("published", {}).get("tokens_per_s")
    if baseline:
        report["speedup_vs_published"] = {
            k: round(v["tokens_per_s"] / baseline, 2)
            for k, v in report["paths"].items()
            if k != "published"
        }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if not args.no_rss:
        report["peak_memory"] = measure_rss(args)
    report["machine"]["load_average_end"] = os.getloadavg()
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)
    print_table(report)


def print_table(report: dict[str, Any]) -> None:
    s = report["settings"]
    print(
        f"\n{s['agents']} agents x {s['problems']} problems x G={s['group_size']} x "
        f"{s['max_new_tokens']} new tokens, {s['model']} {s['dtype']} on {s['device']}"
    )
    print(f"{'path':<14}{'tokens/s':>12}{'ms/step':>10}{'warm-up s':>11}{'vs published':>14}")
    for name, row in report["paths"].items():
        speedup = report.get("speedup_vs_published", {}).get(
            name, 1.0 if name == "published" else None
        )
        shown = f"{speedup:.2f}x" if speedup is not None else "-"
        print(
            f"{name:<14}{row['tokens_per_s']:>12.1f}{row['ms_per_decode_step']:>10.2f}"
            f"{row['warmup_seconds']:>11.2f}{shown:>14}"
        )
    memory = report.get("peak_memory")
    if memory:
        print(f"\n{'peak memory (MiB)':<28}{'ours':>10}{'published':>12}{'ratio':>8}")
        for key in sorted(k for k in memory if k.startswith("ratio_")):
            phase = key.removeprefix("ratio_")
            if phase in memory["team"]:
                ours, theirs = memory["team"][phase], memory["published"][phase]
            else:  # the part above the interpreter + torch baseline
                measured = phase.replace("_above_start", "")
                ours, theirs = (
                    memory[s][measured] - memory[s]["start_mb"] for s in ("team", "published")
                )
            print(f"{phase:<28}{ours:>10.0f}{theirs:>12.0f}{memory[key]:>8.2f}")


if __name__ == "__main__":
    main()
