"""Params sections -> objects: the team policy, the environment, sampling, settings, Claude hooks.

The one place where concrete classes are chosen (the LoRA team or the Claude agents; the environment,
through the registry `envs/registry.py`).

Stages call these so every stage turns the same params into the same objects.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestry import io, paths
from orchestry.agents.base import SamplingSpec
from orchestry.agents.lora.base_model import ModelSpec, device_type, load_config, resolve_dtype
from orchestry.agents.lora.dist import world_from_env
from orchestry.agents.lora.engine import cuda_engine
from orchestry.agents.lora.memory_plan import CPU_PLAN, MIXED_TOKENS_PER_ROW, MemoryPlan
from orchestry.agents.lora.team import LoraSpec, TeamPolicy
from orchestry.envs.base import BaselineEnv, Env, Roles
from orchestry.envs.code.sandbox import SandboxLimits
from orchestry.envs.options import EnvOptions
from orchestry.envs.registry import env_kind
from orchestry.envs.solo import SOLO_AGENT, SoloEnv
from orchestry.params import Params


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def model_spec(params: Params) -> ModelSpec:
    m = params.model
    return ModelSpec(
        name=m.name,
        dtype=m.dtype,
        device=m.device,
        quantization=m.quantization,
        cache_dir=m.cache_dir,
    )


def lora_spec(params: Params) -> LoraSpec:
    lo = params.model.lora
    return LoraSpec(
        r=lo.r, alpha=lo.alpha, dropout=lo.dropout, target_modules=tuple(lo.target_modules)
    )


def make_policy(params: Params) -> TeamPolicy:
    m = params.model
    base: ModelSpec | dict[str, ModelSpec] = model_spec(params)
    if m.agent_models:
        base = {
            a: replace(model_spec(params), name=m.agent_models.get(a, m.name)) for a in m.agents
        }
    return TeamPolicy(
        base,
        m.agents,
        lora_spec(params),
        shared_adapter=m.shared_adapter,
        seed=params.seed,
        gradient_checkpointing=gradient_checkpointing(params),
        record_update_graphs=memory_plan(params).record_update_graphs,
    )


def single_agent_params(params: Params) -> Params:
    """The team's params with one agent, `SOLO_AGENT`, on the team's base model (`model.name`): the
    single agent's policy (`make_policy`) and training run, with every other section unchanged."""
    model = params.model.model_copy(
        update={"agents": [SOLO_AGENT], "agent_models": {}, "shared_adapter": False}
    )
    return params.model_copy(update={"model": model})


def memory_plan(params: Params) -> MemoryPlan:
    """The `auto` update settings (agents/lora/memory_plan.py): on a CPU 8 rows with checkpointing;
    on a GPU the CUDA engine's plan (agents/lora/cuda/memory_plan.py) from the base model's size, the
    rows' length and the GPU's memory (what is free plus what this process holds already, so the
    plan is the same before and after loading)."""
    if device_type(params.model.device) != "cuda":
        return CPU_PLAN
    engine = cuda_engine()
    spec = model_spec(params)
    free, _ = torch.cuda.mem_get_info()
    dtype = resolve_dtype(spec.dtype, torch.device("cuda"))
    size = engine.model_size(load_config(spec), torch.finfo(dtype).bits // 8)
    new = params.sampling.max_new_tokens
    t = params.train
    return engine.plan_memory(
        size,
        prompt_tokens=engine.PROMPT_TOKENS_ESTIMATE,
        completion_tokens=new,
        group_size=t.group_size,
        decode_rows=t.group_size * t.problems_per_step * len(params.model.agents),
        free_bytes=free + torch.cuda.memory_reserved(),
        cap_tokens_per_row=MIXED_TOKENS_PER_ROW,
    )


def microbatch(params: Params) -> int:
    """`train.microbatch`, with `auto` = 8 rows on a CPU, on a GPU what fits (`memory_plan`)."""
    setting = params.train.microbatch
    return memory_plan(params).microbatch if setting == "auto" else setting


def gradient_checkpointing(params: Params) -> bool:
    """`model.gradient_checkpointing`, with `auto` = on for a CPU (memory), on a GPU only when the
    model leaves no room for 8 rows without it (`memory_plan`)."""
    setting = params.model.gradient_checkpointing
    return memory_plan(params).gradient_checkpointing if setting == "auto" else setting


def sampling_spec(params: Params) -> SamplingSpec:
    s = params.sampling
    return SamplingSpec(
        temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=s.max_new_tokens
    )


def sandbox_workers(params: Params) -> int:
    """`sandbox.workers`, with `auto` = this process's cores shared by the training processes that
    torchrun started on this machine (each runs its own sandbox)."""
    if params.sandbox.workers != "auto":
        return params.sandbox.workers
    return max(1, params.sandbox.worker_count() // world_from_env().local_size)


def sandbox_limits(params: Params) -> SandboxLimits:
    return SandboxLimits(**params.sandbox.model_dump(exclude={"workers"}))


def make_env(params: Params, training: bool = True) -> Env:
    """The environment `env.name` selects (envs/registry.py), with its params: its own section,
    the reward weights, the sandbox limits and, for training, the feedback mode (evaluation is
    single-turn and does not depend on the train section; its code env adds the robust test pass
    rate, envs/code/trivial_tests.py)."""
    kind = env_kind(params.env.name)
    section = getattr(params.env, kind.name, None)  # an env without settings has no section
    options = EnvOptions(
        settings=section.model_dump() if section is not None else {},
        reward=params.reward.model_dump(),
        limits=sandbox_limits(params),
        workers=sandbox_workers(params),
        feedback=params.train.feedback if training else None,
        rename_lone_helper=params.env.rename_lone_helper,
        single_prompt=params.env.single_prompt,
        tools=params.env.tools.model_dump(),
        evaluation=not training,
        judge=lambda: story_judge(params),
    )
    return kind.build(Roles.from_agents(params.model.agents), options)


def make_solo_env(params: Params) -> SoloEnv:
    """The training environment `env.name` selects, seen by one agent alone (the whole task, its
    answer scored as the team's joint action): what `train_single` trains on."""
    return SoloEnv(make_env(params))  # type: ignore[arg-type]  # every env has the solo views


def read_tasks(params: Params, split: str) -> list[Any]:
    """A prepared split (`train` or `test`) as the tasks of `env.name`."""
    path = paths.split(split)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; run the prepare stage first (dvc repro prepare)"
        )
    kind = env_kind(params.env.name)
    try:
        return [kind.tasks.task_from_dict(d) for d in io.read_jsonl(path)]
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"{path} does not hold {params.env.name} tasks ({err!r}); rerun the prepare stage "
            "for this env.name"
        ) from None


CLAUDE_BACKEND = "orchestry.agents.claude.backend"
"""Imported only when params choose Claude (`Params.uses_claude`): a stage that never calls the API
does not depend on the client (orchestry/bookkeeping/fingerprint.py follows it for such params)."""


def claude_backend() -> Any:
    """The Claude backend module (`CLAUDE_BACKEND`), imported now."""
    return importlib.import_module(CLAUDE_BACKEND)


def story_judge(params: Params) -> Callable[[Any, str], float | None] | None:
    """The story's quality judge: None (the offline judge) or Claude with the judge prompt (the
    budget stop still stops the run)."""
    if params.env.story.judge == "offline":
        return None
    claude = claude_backend()
    client = claude.ClaudeClient(claude_settings(params, paths.TRAIN))
    template = env_kind("story").tasks.load_judge_prompt()  # the env params chose

    def judge(task, story: str) -> float | None:
        try:  # a failed call: the env scores this story offline and says so in its row
            return claude.judge_story(client, template, task.theme, story)
        except claude.ClaudeCallFailed:
            return None

    return judge


def claude_settings(params: Params, out_dir: Path):
    """The Claude client settings; the ledger and cache live beside the stage's outputs."""
    a = params.anthropic
    return claude_backend().ClaudeSettings(
        model=a.model,
        max_tokens=a.max_tokens,
        base_url=a.base_url or None,
        timeout_s=a.timeout_s,
        max_attempts=a.max_attempts,
        budget_usd=a.budget_usd,
        prices={m: (p[0], p[1]) for m, p in a.prices.items()},
        cache_dir=str(paths.ANTHROPIC_CACHE) if a.cache else None,
        ledger_path=str(out_dir / "api_ledger.jsonl"),
    )


@dataclass(frozen=True)
class ClaudeJointJudge:
    """`beam.judge_weight`'s judge: Claude's score in [0, 1] of how well a joint action solves the
    task, the task shown as the environment gives it to one model alone (`solo_observe`, which
    every environment has)."""

    client: Any  # a ClaudeClient (`spent_usd` reads its dollars)
    env: BaselineEnv

    def __call__(self, task: Any, actions: Mapping[str, str]) -> float | None:
        solo = self.env.solo_observe(task)
        task_text = "\n\n".join(m["content"] for m in solo if m["role"] == "user")
        return claude_backend().judge_joint(self.client, task_text, actions)


def beam_judge(params: Params, env: Env, gen: object, out_dir: Path) -> ClaudeJointJudge | None:
    """The judge of `beam.judge_weight` > 0 (else None). It shares the Claude team's client when
    `evaluate.backend` is claude (one budget, one ledger), else has its own beside `out_dir`."""
    if params.beam.judge_weight <= 0:
        return None
    client = getattr(gen, "client", None) or claude_backend().ClaudeClient(
        claude_settings(params, out_dir)
    )
    return ClaudeJointJudge(client, env)  # type: ignore[arg-type]  # every env has solo_observe


def make_generator(params: Params, agents: list[str], out_dir: Path):
    """Local base model + fresh adapters, or Claude agents when `evaluate.backend` is claude."""
    if params.evaluate.backend == "claude":
        claude = claude_backend()
        return claude.ClaudeAgents(claude.ClaudeClient(claude_settings(params, out_dir)), agents)
    p = params.model_copy(update={"model": params.model.model_copy(update={"agents": agents})})
    return make_policy(p)


def spent_usd(*users: object) -> float | None:
    """Dollars the Claude generators (or judges) among these spent: their clients' ledger totals,
    a client they share counted once; None when none of them uses Claude."""
    clients = {id(u.client): u.client for u in users if hasattr(u, "client")}
    spent = [c.spent_usd for c in clients.values()]
    return float(sum(spent)) if spent else None
