"""MAGRPO training steps: our train loop versus the published implementation (comlrl 1.4.3).

Both sides train the same agents (params.yaml `model.agents`) of the embedded SmolLM2-135M-Instruct
(float32, CPU) on the same training problems in the same order, with the same prompts (orchestry.envs.code.prompts),
the same level reward scored in orchestry's sandbox, G samples per agent, one turn, and the same
learning rate and sampling settings. Ours: `orchestry.stages.train.train_loop` (one base model + one LoRA
adapter per agent). Published: `comlrl.trainers.reinforce.MAGRPOTrainer` through its public API (one
full model per agent). Each side runs in its own subprocess, so peak RSS (VmHWM) does not mix.

    python benchmarks/vs_comlrl.py --out results/bench/vs_comlrl.json

Prints a table and writes JSON to --out. This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from orchestry.bookkeeping.provenance import write_bench_manifest
from orchestry.params import Params, load_params, parse_params

REPO = Path(__file__).resolve().parent.parent
SIDES = ("ours", "comlrl")

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def proc_status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} line in /proc/self/status")


def step_clock() -> list[float]:
    """Timestamps of every optimizer step in this process (a global torch hook, same on both sides)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    marks: list[float] = []
    register_optimizer_step_post_hook(lambda *_: marks.append(time.perf_counter()))
    return marks


def step_times(start: float, marks: list[float], n_agents: int, steps: int) -> list[float]:
    """Wall time of each training step: a step ends with the last agent's optimizer step."""
    if len(marks) != steps * n_agents:
        raise RuntimeError(
            f"expected {steps} steps x {n_agents} agents = {steps * n_agents} optimizer steps, "
            f"saw {len(marks)}: a step no longer means one optimizer step per agent"
        )
    ends = marks[n_agents - 1 :: n_agents]
    return [b - a for a, b in zip([start, *ends[:-1]], ends, strict=True)]


def count_new_tokens(model: Any, eos: int, tokens: list[int]) -> None:
    """Wrap `model.generate` to record each row's new tokens, up to and including EOS."""
    generate = model.generate

    def counted(*args: Any, **kwargs: Any) -> Any:
        out = generate(*args, **kwargs)
        rows = getattr(out, "sequences", out)[:, kwargs["input_ids"].shape[1] :].tolist()
        tokens.extend(row.index(eos) + 1 if eos in row else len(row) for row in rows)
        return out

    model.generate = counted


def run_ours(job: dict[str, Any]) -> dict[str, Any]:
    """Our side: make_policy + train_loop, rollouts in the job's temporary folder, no checkpoints."""
    from dataclasses import replace

    import torch

    import orchestry.stages.train
    from orchestry import paths
    from orchestry.algos.magrpo import group_advantages
    from orchestry.envs.code.problems import read_problems
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec, seed_everything
    from orchestry.stages.train_from_params import loop_settings

    out: dict[str, Any] = {"rss_after_imports_mb": proc_status_mb("VmRSS")}
    params = parse_params(job["params"], "params.yaml + benchmark overrides")
    problems = read_problems(paths.split("train"))
    seed_everything(params.seed)
    start = time.perf_counter()
    policy = make_policy(params)
    out["setup_s"] = time.perf_counter() - start
    out["peak_after_setup_mb"] = proc_status_mb("VmHWM")
    tokens: list[int] = []
    agent = params.model.agents[0]  # one base model serves every agent
    count_new_tokens(policy.peft_model(agent), policy.tokenizer(agent).eos_token_id, tokens)
    if job["min_new_tokens"]:  # train.py has no option for it: patch the spec it builds
        orchestry.stages.train.sampling_spec = lambda p: replace(
            sampling_spec(p), min_new_tokens=job["min_new_tokens"]
        )
    rollouts = Path(job["workdir"]) / "rollouts.jsonl"
    marks = step_clock()
    start = time.perf_counter()
    env = make_env(params)
    orchestry.stages.train.train_loop(
        loop_settings(params), policy, env, problems, job["plan"], rollouts, None
    )
    out["total_s"] = time.perf_counter() - start
    out["step_s"] = step_times(start, marks, len(params.model.agents), len(job["plan"]))
    out["new_tokens"] = sum(tokens)
    # update_agents skips rows whose advantage is 0, e.g. all of a group whose G returns are equal.
    groups: dict[tuple[int, str], list[float]] = {}
    for line in rollouts.read_text().splitlines():
        row = json.loads(line)
        groups.setdefault((row["step"], row["problem_id"]), []).append(row["return"])
    t = params.train
    adv = group_advantages(
        torch.tensor(list(groups.values())), t.advantage_mode, t.normalize, t.std_floor
    )
    out["rows_trained"] = int((adv != 0).sum()) * len(params.model.agents)
    return out


def comlrl_callables(
    params: Params, tokenizer: Any, reward_noise: float = 0.0
) -> tuple[list[Callable], Callable]:
    """comlrl's formatters (one per agent: dataset item -> prompt text) and reward callable.

    Prompts are the code env's observations, chat-templated; the reward is the env's score (the level
    reward of each joint action, run in orchestry's sandbox), plus N(0, `reward_noise`) as on our
    side (`timed_train.add_reward_noise`). Dataset items are {"problem_id": id}.
    """
    from timed_train import add_reward_noise

    from orchestry import paths
    from orchestry.envs.code.problems import read_problems
    from orchestry.stages.from_params import make_env

    env = make_env(params)
    if reward_noise:
        add_reward_noise(env, reward_noise, params.seed)
    roles = env.roles
    by_id = {p.id: p for p in read_problems(paths.split("train"))}

    def formatter(agent: str) -> Callable[[dict[str, str]], str]:
        def prompt(item: dict[str, str]) -> str:
            messages = env.observe(by_id[item["problem_id"]], agent)
            return tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )

        return prompt

    def reward_func(*completions: list[str], batch_items: list[dict[str, str]]) -> list[float]:
        """One list of texts per agent (in `model.agents` order) -> one reward per joint action."""
        problem = by_id[batch_items[0]["problem_id"]]
        batch = [
            (problem, {a: env.act(problem, a, x) for a, x in zip(roles.agents, texts, strict=True)})
            for texts in zip(*completions, strict=True)
        ]
        return [outcome.total for outcome in env.score(batch)]

    return [formatter(a) for a in roles.agents], reward_func


def run_comlrl(job: dict[str, Any]) -> dict[str, Any]:
    """The published side: comlrl's MAGRPOTrainer with our prompts and reward as its callables."""
    os.environ.setdefault("WANDB_MODE", "disabled")
    import torch
    from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
    from datasets import Dataset
    from transformers import AutoTokenizer

    from orchestry.stages.from_params import seed_everything

    out: dict[str, Any] = {"rss_after_imports_mb": proc_status_mb("VmRSS")}
    params = parse_params(job["params"], "params.yaml + benchmark overrides")
    t, s = params.train, params.sampling
    agents = params.model.agents
    # Ours sets this in load_base_model; without it CPU matmuls on subnormals are ~20x slower.
    torch.set_flush_denormal(True)
    seed_everything(params.seed)
    tokenizer = AutoTokenizer.from_pretrained(job["model_dir"])
    # comlrl takes the first pad token in a prompt as the prompt's end; SmolLM2 pads with
    # <|im_end|>, which the chat template puts after every message, so pad with an unused token.
    tokenizer.pad_token = "<|endoftext|>"
    formatters, reward_func = comlrl_callables(params, tokenizer, job.get("reward_noise", 0.0))
    per_step = t.problems_per_step
    config = MAGRPOConfig(
        num_train_epochs=1,
        agent_learning_rate=t.lr,
        num_agents=len(agents),
        agent_devices=job.get("device", "cpu"),
        num_generations=t.group_size,
        max_new_tokens=s.max_new_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,  # 0 = off, as ours
        num_turns=1,
        joint_mode=t.joint_mode,
        eval_interval=0,
        rollout_buffer_size=per_step,  # an agent updates once per `per_step` problems ...
        train_batch_size=per_step,  # ... in one optimizer step
        advantage_mode=t.advantage_mode,
        advantage_normalization=t.normalize,
    )
    dataset = Dataset.from_list([{"problem_id": pid} for step in job["plan"] for pid in step])
    start = time.perf_counter()
    trainer = MAGRPOTrainer(
        agent_model=job["model_dir"],
        num_agents=len(agents),
        tokenizer=tokenizer,
        model_config={"torch_dtype": getattr(torch, job.get("dtype", "float32"))},
        train_dataset=dataset,
        reward_func=reward_func,
        formatters=formatters,
        wandb_config=None,
        args=config,
    )
    out["setup_s"] = time.perf_counter() - start
    out["peak_after_setup_mb"] = proc_status_mb("VmHWM")
    tokens: list[int] = []
    for model in trainer.agents:
        count_new_tokens(model, tokenizer.eos_token_id, tokens)
    forced = {"min_new_tokens": job["min_new_tokens"]} if job["min_new_tokens"] else {}
    marks = step_clock()
    start = time.perf_counter()
    trainer.train(**forced)  # train's keyword arguments go to every generate call
    out["total_s"] = time.perf_counter() - start
    out["step_s"] = step_times(start, marks, len(agents), len(job["plan"]))
    out["new_tokens"] = sum(tokens)
    out["rows_trained"] = len(job["plan"]) * per_step * t.group_size * len(agents)
    return out


def bench_params(args: argparse.Namespace) -> Params:
    """params.yaml with the benchmark's settings (validated like the file itself)."""
    data = load_params(args.params).model_dump()
    data["model"].update(dtype="float32", device="cpu", shared_adapter=False, agent_models={})
    data["sampling"]["max_new_tokens"] = args.max_new_tokens
    data["train"].update(
        max_steps=args.steps,
        problems_per_step=args.problems_per_step,
        group_size=args.group_size,
        turns=1,
        kl_coef=0.0,
        judge_weight=0.0,
    )
    return parse_params(data, f"{args.params} + benchmark overrides")


def prepare_job(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Make sure the split and the converted model exist; fix the plan of problems per step."""
    from orchestry import paths
    from orchestry.agents.lora.base_model import (
        EMBEDDED_MODEL,
        convert_gguf_model,
        embedded_gguf_path,
    )
    from orchestry.envs.code.problems import read_problems
    from orchestry.stages.train import schedule_problems

    if not Path("data/prepared/train.jsonl").is_file():
        subprocess.run([sys.executable, "-m", "orchestry", "prepare"], check=True)
    params = bench_params(args)
    name = args.model or params.model.name  # a model folder or hub id needs no embedded package
    if name == EMBEDDED_MODEL:
        model_dir = convert_gguf_model(embedded_gguf_path(), Path(params.model.cache_dir) / name)
    elif Path(name).is_dir():
        model_dir = Path(name)
    elif Path(name).is_absolute() or name.startswith((".", "~")):
        raise SystemExit(f"model folder {name!r} does not exist")
    else:
        model_dir = None  # a hub id: both sides load it by name
    problems = read_problems(paths.split("train"))
    epochs = math.ceil(args.steps * args.problems_per_step / len(problems))
    plan = schedule_problems(problems, args.problems_per_step, epochs, params.seed)[: args.steps]
    if any(len(step) != args.problems_per_step for step in plan):
        raise SystemExit(
            f"the {len(problems)} training problems do not split into steps of "
            f"{args.problems_per_step}; choose --problems-per-step dividing {len(problems)}"
        )
    return {
        "params": params.model_dump(),
        "plan": plan,
        "model_dir": str(model_dir.resolve()) if model_dir else name,
        "min_new_tokens": args.min_new_tokens,
        "workdir": str(workdir),
    }


def summarize(side: dict[str, Any]) -> dict[str, Any]:
    """Add the step-time statistics and the peak above the post-import baseline."""
    steps = side["step_s"]
    side["step_median_s"] = statistics.median(steps[1:] or steps)  # the first step warms up
    side["step_mean_s"] = statistics.fmean(steps)
    side["peak_above_imports_mb"] = side["peak_rss_mb"] - side["rss_after_imports_mb"]
    return side


def print_table(report: dict[str, Any]) -> None:
    s = report["settings"]
    print(
        f"\n{s['agents']} agents, {s['steps']} steps x {s['problems_per_step']} problems x "
        f"G={s['group_size']}, <= {s['max_new_tokens']} new tokens, float32 CPU"
    )
    keys = ("setup_s", "step_median_s", "step_mean_s", "total_s", "new_tokens", "rows_trained")
    keys += ("rss_after_imports_mb", "peak_rss_mb", "peak_above_imports_mb")
    print(f"{'':<24}{'ours':>12}{'comlrl':>12}{'ours/comlrl':>13}")
    for key in keys:
        ours, theirs = (report["sides"][side][key] for side in SIDES)
        ratio = report["ratios"].get(key, math.nan)
        print(f"{key:<24}{ours:>12.1f}{theirs:>12.1f}{ratio:>13.3f}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--params", default="params.yaml", help="base settings (repo-relative)")
    parser.add_argument("--steps", type=int, default=3, help="training steps per side")
    parser.add_argument("--problems-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4, help="G samples per agent and problem")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--min-new-tokens", type=int, default=0, help="force this many tokens (0 = stop at EOS)"
    )
    parser.add_argument(
        "--model", help="a model folder or hub id for both sides (default: params model.name)"
    )
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 0 <= args.min_new_tokens <= args.max_new_tokens:
        parser.error("--min-new-tokens must be between 0 and --max-new-tokens")
    return args


def main() -> None:
    args = parse_args()
    args.out = args.out.resolve()
    os.chdir(REPO)  # orchestry's stages read data/ and cache/ relative to the repository
    if args.child:
        job = json.loads(args.job.read_text())
        side = (run_ours if args.child == "ours" else run_comlrl)(job)
        side["peak_rss_mb"] = proc_status_mb("VmHWM")
        args.out.write_text(json.dumps(side))
        return
    report: dict[str, Any] = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "child", "job")},
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            **{p: version(p) for p in ("torch", "transformers", "peft", "comlrl")},
        },
        "sides": {},
    }
    with tempfile.TemporaryDirectory(prefix="vs_comlrl-") as tmp:
        job = prepare_job(args, Path(tmp))
        report["settings"]["agents"] = len(job["params"]["model"]["agents"])
        report["settings"]["plan"] = job["plan"]
        report["settings"]["sampling"] = job["params"]["sampling"]
        report["settings"]["lr"] = job["params"]["train"]["lr"]
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        for side in SIDES:
            result = Path(tmp) / f"{side}.json"
            command = [sys.executable, __file__, "--child", side, "--job", str(job_path)]
            env = {**os.environ, "WANDB_MODE": "disabled"}
            done = subprocess.run([*command, "--out", str(result)], env=env, check=False)
            if done.returncode != 0:
                raise SystemExit(f"the {side} side failed with exit code {done.returncode}")
            report["sides"][side] = summarize(json.loads(result.read_text()))
            print(f"{side}: {json.dumps(report['sides'][side])}", flush=True)
    ours, theirs = (report["sides"][s] for s in SIDES)
    report["ratios"] = {k: ours[k] / theirs[k] for k in ours if k != "step_s" and theirs.get(k)}
    report["machine"]["load_average_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)
    print_table(report)


if __name__ == "__main__":
    main()
