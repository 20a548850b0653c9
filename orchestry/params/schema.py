"""The typed schema of params.yaml: one pydantic model per section.

These models are the only home of the defaults and their descriptions: docs/params.md (the params reference) is
rendered from them (orchestry/bookkeeping/params_doc.py, `python -m orchestry params-doc`), Snakemake's JSON schema
too (`python -m orchestry schema`), and the tests check that params.yaml sets exactly these defaults.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from orchestry.params.env_schema import (
    EnvParams,
    PrepareParams,
    check_environment,
    environment_roles,
)
from orchestry.params.eval_schema import EvalParams
from orchestry.params.orchestrate_schema import OrchestrateParams
from orchestry.params.search_schema import BeamParams, PromptPolicyParams
from orchestry.params.section import Section
from orchestry.params.train_schema import SftParams, TrainParams

BASELINE_NAMES = ("single", "naive_concat", "sequential", "discussion")


class LoraParams(Section):
    """LoRA adapter settings (one adapter per agent, or one shared)."""

    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA branch (0 = none)."
    )
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Modules of the base model that get adapters.",
    )


class ModelParams(Section):
    """The base model and one LoRA adapter per agent."""

    name: str = Field(
        "smollm2-135m-instruct",
        description="`smollm2-135m-instruct` (the embedded GGUF), a Hugging Face hub id "
        "(e.g. `Qwen/Qwen2.5-Coder-1.5B-Instruct`) or a local directory.",
    )
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "bfloat16",
        description="Dtype of the base model's weights (LoRA adapters stay float32); `auto` = "
        "bfloat16 on a GPU that supports it, else float32. bfloat16 is the GPU runs' dtype, and on "
        "a CPU with AVX512-BF16 or AMX its update is several times float32's speed "
        "(results/bench/cpu_kernels.json); on a CPU without them choose float32.",
    )
    device: Literal["cpu", "cuda", "auto"] = Field(
        "cpu",
        description="`auto` = cuda when available, else cpu; `cuda` without a GPU is an error.",
    )
    quantization: Literal["none", "4bit"] = Field(
        "none",
        description="`4bit` loads the base model in NF4 with bitsandbytes (CUDA only); "
        "`none` = unquantized.",
    )
    cache_dir: str = Field(
        "cache/models",
        description="Directory where the embedded GGUF model is converted once to safetensors.",
    )
    agents: list[str] = Field(
        ["aux", "main"],
        min_length=2,
        description="Unique agent names: helpers first, the main agent last "
        "(3 agents for `coop3`); with `env.name` story or writing, [aux, main] stands for the "
        "environment's roles (writer, editor, narrator / first, second).",
    )
    agent_models: dict[str, str] = Field(
        {},
        description="Optional base model per agent (heterogeneous team), e.g. "
        "`{main: Qwen/Qwen2.5-Coder-3B-Instruct}`; agents not named use `model.name`.",
    )
    shared_adapter: bool = Field(
        False,
        description="All agents train one shared adapter (parameter sharing) instead of one each.",
    )
    gradient_checkpointing: bool | Literal["auto"] = Field(
        "auto",
        description="Recompute the base model's activations in the update's backward pass instead "
        "of keeping them (one 8-row update on 2 CPU cores: peak 3.2 instead of 5.7 GiB, "
        "6.0 instead of 6.3 s). `auto` = on for a CPU; on a GPU off unless the model leaves no "
        "room for 8 rows without it (agents/lora/cuda/memory_plan.py; H100, 64-row micro-batches: "
        "17 GB peak, update 1.5 s instead of 17-30 s with it on at 8 rows).",
    )
    lora: LoraParams = LoraParams()

    @model_validator(mode="after")
    def _agents_unique(self) -> ModelParams:
        if len(set(self.agents)) != len(self.agents):
            raise ValueError(f"agent names must be unique, got {self.agents}")
        unknown = sorted(set(self.agent_models) - set(self.agents))
        if unknown:
            raise ValueError(
                f"agent_models names unknown agents {unknown}; agents are {self.agents}"
            )
        return self


class SamplingParams(Section):
    """How completions are sampled, in training and in evaluation."""

    temperature: float = Field(0.8, gt=0.0, le=5.0, description="Softmax temperature.")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling mass (1.0 = off).")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens (0 = off).")
    max_new_tokens: int = Field(
        128, ge=1, le=4096, description="Most tokens generated per completion."
    )


class SandboxParams(Section):
    """Limits for running model-written code and its tests (per program)."""

    timeout_s: float = Field(
        15.0,
        gt=0.0,
        description="Wall clock for one program and its tests, in seconds; well above `cpu_s`, so "
        "the CPU limit decides and a busy machine (a program waiting for a core) scores the same.",
    )
    cpu_s: int = Field(5, ge=1, description="CPU time limit of the program, in seconds.")
    memory_mb: int = Field(256, ge=64, description="Address-space limit of the program, in MiB.")
    max_processes: int = Field(
        8, ge=1, description="Most processes the sandbox user may run at once."
    )
    max_file_mb: int = Field(8, ge=1, description="Largest file the program may write, in MiB.")
    max_output_kb: int = Field(
        32, ge=1, description="stdout and stderr kept, in KiB; the rest is discarded."
    )
    workers: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="Programs tested concurrently; `auto` = the CPU cores this process may use "
        "(2 on the reference machine; a lent 16-core GPU machine stalled a step for 10 s on "
        "programs that ran into the timeout with 2).",
    )

    def worker_count(self) -> int:
        """`workers`, with `auto` resolved to the CPU cores this process may use."""
        return self.workers if self.workers != "auto" else len(os.sched_getaffinity(0))


class RewardParams(Section):
    """The paper's code-collaboration level reward; the defaults sum to 4.0 (the maximum)."""

    aux_defined: float = Field(0.4, description="L1: aux defined with a return (does not gate).")
    main_defined: float = Field(
        0.6, description="L1: main entry point defined with a return (gates)."
    )
    syntax: float = Field(0.5, description="L2: the joined program parses (gates).")
    tests: float = Field(1.0, description="L3: times the fraction of asserts passed.")
    coop_call: float = Field(0.5, description="A test passes, aux exists and main calls aux.")
    coop_nontrivial: float = Field(
        1.0, description="Added when main is not a thin wrapper around aux."
    )
    ignored_penalty: float = Field(
        0.5, ge=0.0, description="Subtracted when aux's value is ignored (0 = no penalty)."
    )
    coop_gate: Literal["any", "scaled", "all"] = Field(
        "any",
        description="When the cooperation bonus is paid: `any` (the paper) once one test passes; "
        "`scaled` times the fraction of tests passed; `all` only when every test passes.",
    )


class SmokeParams(Section):
    """The smoke run before training; it fails loudly on a non-finite loss, unchanged adapters or
    an idle sandbox."""

    steps: int = Field(2, ge=1, description="Training steps of the smoke run.")
    problems: int = Field(2, ge=1, description="Training problems the smoke run uses.")


class SchemesParams(Section):
    """Detection of the cooperation schemes in the code."""

    windows: int = Field(4, ge=1, description="Training windows of the scheme evolution.")


class FiguresParams(Section):
    """Figures and tables of the report."""

    smoothing: int = Field(
        5, ge=1, description="Moving-average window of the training curves, in steps (1 = none)."
    )


class AnthropicParams(Section):
    """The Claude client (expert-edits feedback, judge term, API agents); the key is read only from
    `ANTHROPIC_API_KEY`."""

    model: str = Field(
        "claude-sonnet-4-5", description="Claude model id; must have an entry in `prices`."
    )
    max_tokens: int = Field(1024, ge=1, description="Output-token limit per call.")
    base_url: str = Field("", description="API endpoint ('' = the SDK default).")
    timeout_s: float = Field(60.0, gt=0.0, description="HTTP timeout per attempt, in seconds.")
    max_attempts: int = Field(5, ge=1, description="Attempts per call on retryable errors.")
    budget_usd: float = Field(
        5.0,
        ge=0.0,
        description="Hard limit in dollars per run; a call that could exceed it is not made and "
        "the stage stops cleanly (0 = cached replies only).",
    )
    prices: dict[str, list[float]] = Field(
        {
            "claude-sonnet-4-5": [3.0, 15.0],
            "claude-haiku-4-5": [1.0, 5.0],
            "claude-opus-4-1": [15.0, 75.0],
        },
        description="Model -> [input, output] dollars per million tokens.",
    )
    cache: bool = Field(
        True, description="Answer identical requests from `cache/anthropic/` (false = always call)."
    )


class Params(Section):
    """Top-level keys of params.yaml; each section below is a mapping under its own key."""

    seed: int = Field(
        0,
        ge=0,
        description="Seeds python, numpy and torch and the split shuffle; same params -> same "
        "outputs on CPU.",
    )
    model: ModelParams = ModelParams()
    sampling: SamplingParams = SamplingParams()
    sandbox: SandboxParams = SandboxParams()
    prepare: PrepareParams = PrepareParams()
    env: EnvParams = EnvParams()
    reward: RewardParams = RewardParams()
    train: TrainParams = TrainParams()
    smoke: SmokeParams = SmokeParams()
    sft: SftParams = SftParams()
    evaluate: EvalParams = EvalParams()
    prompt_policy: PromptPolicyParams = PromptPolicyParams()
    beam: BeamParams = BeamParams()
    orchestrate: OrchestrateParams = OrchestrateParams()
    schemes: SchemesParams = SchemesParams()
    figures: FiguresParams = FiguresParams()
    anthropic: AnthropicParams = AnthropicParams()

    @model_validator(mode="before")
    @classmethod
    def _environment_roles(cls, data: object) -> object:
        return environment_roles(data)

    def uses_claude(self) -> bool:
        """Whether any setting sends a call to Claude: the agents, a judge or the expert's edits
        (what selects the Claude backend's code, orchestry/bookkeeping/fingerprint.py)."""
        t = self.train
        return (
            self.evaluate.backend == "claude"
            or (self.env.name == "story" and self.env.story.judge != "offline")
            or (t.feedback == "expert_edits" and t.turns > 1)
            or t.judge_weight > 0
            or self.beam.judge_weight > 0
        )

    @model_validator(mode="after")
    def _fits_the_environment(self) -> Params:
        check_environment(self.env, self.model.agents, self.train.curriculum, self.prepare.sets)
        if (
            self.evaluate.processes > 1
            and self.env.name == "story"
            and self.env.story.judge == "claude"
        ):
            raise ValueError(
                f"evaluate.processes ({self.evaluate.processes}) needs env.story.judge offline: "
                "the Claude judge keeps one budget and cache per process"
            )
        return self
