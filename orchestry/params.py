"""The typed schema of params.yaml, validated once at the boundary.

Every stage reads its own section through `load_params`. A bad file (unknown key, wrong type, value out of
range) raises `ParamsError` with one line naming the key path and what is allowed; the CLI turns it into exit
code 2 before any stage writes anything. `workflow/schemas/params.schema.json` is generated from these models
(`python -m orchestry schema`) so Snakemake's `validate()` checks the same rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

BASELINE_NAMES = ("single", "naive_concat", "sequential", "discussion")


class Section(BaseModel):
    """A params section: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LoraParams(Section):
    r: int = Field(16, ge=1, description="LoRA rank.")
    alpha: int = Field(32, ge=1, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA branch.")
    target_modules: list[str] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Modules that get adapters.",
    )


class ModelParams(Section):
    name: str = Field(
        "smollm2-135m-instruct",
        description="smollm2-135m-instruct (embedded), a Hugging Face hub id, or a local directory.",
    )
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    quantization: Literal["none", "4bit"] = Field(
        "none", description="4bit = bitsandbytes NF4 (CUDA)."
    )
    cache_dir: str = Field("cache/models", description="Where the GGUF model is converted once.")
    agents: list[str] = Field(
        ["aux", "main"], min_length=2, description="Agent names; last is main."
    )
    agent_models: dict[str, str] = Field(
        {}, description="Optional per-agent base model (heterogeneous team); default: `name`."
    )
    shared_adapter: bool = Field(
        False, description="All agents share one adapter (parameter sharing)."
    )
    gradient_checkpointing: bool = Field(
        True,
        description="Recompute the base model's activations in the backward pass of a training "
        "step instead of keeping them (less memory, ~1/3 more compute in the update).",
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
    temperature: float = Field(0.8, gt=0.0, le=5.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="0 disables top-k.")
    max_new_tokens: int = Field(128, ge=1, le=4096)


class SandboxParams(Section):
    timeout_s: float = Field(5.0, gt=0.0, description="Wall clock for one program and its tests.")
    cpu_s: int = Field(5, ge=1)
    memory_mb: int = Field(1024, ge=64)
    max_processes: int = Field(8, ge=1)
    max_file_mb: int = Field(8, ge=1)
    max_output_kb: int = Field(32, ge=1)
    workers: int = Field(2, ge=1, description="Programs tested concurrently.")


class SetSplit(Section):
    n_train: int = Field(ge=0)
    n_test: int = Field(ge=0)


class PrepareParams(Section):
    sets: dict[Literal["coop", "humaneval", "coop3"], SetSplit] = Field(
        {"coop": SetSplit(n_train=24, n_test=8), "humaneval": SetSplit(n_train=0, n_test=0)},
        description="Problem sets and how many problems of each go to train and test.",
    )


class RewardParams(Section):
    """The paper's code-collaboration level reward; defaults sum to 4.0."""

    aux_defined: float = Field(0.4, description="L1: aux defined with a return (does not gate).")
    main_defined: float = Field(
        0.6, description="L1: main entry point defined with a return (gates)."
    )
    syntax: float = Field(0.5, description="L2: the joined program parses (gates).")
    tests: float = Field(1.0, description="L3: times the fraction of asserts passed.")
    coop_call: float = Field(0.5, description="A test passes, aux exists and main calls aux.")
    coop_nontrivial: float = Field(1.0, description="Main is not a thin wrapper around aux.")
    ignored_penalty: float = Field(
        0.5, ge=0.0, description="Subtracted when aux's value is ignored."
    )


class TrainParams(Section):
    epochs: int = Field(2, ge=1)
    max_steps: int = Field(0, ge=0, description="Stop after this many steps (0 = all epochs).")
    problems_per_step: int = Field(2, ge=1)
    group_size: int = Field(4, ge=2, description="G: samples per agent per node.")
    turns: int = Field(1, ge=1, le=4)
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount of child returns across turns.")
    early_stop_reward: float = Field(
        0.0, ge=0.0, description="Do not expand a node with reward >= this (0 = off)."
    )
    joint_mode: Literal["aligned", "cross"] = "aligned"
    feedback: Literal["level_feedback", "plain", "expert_edits"] = "level_feedback"
    advantage_mode: Literal["mean", "rloo", "max", "raw"] = "mean"
    normalize: bool = Field(
        False, description="Divide advantages by the group std (with std_floor)."
    )
    std_floor: float = Field(1e-2, gt=0.0)
    logprob_reduction: Literal["sum", "token_mean"] = "token_mean"
    kl_coef: float = Field(
        0.0, ge=0.0, description="Reference-KL (k3) weight; 0 = off as in the paper."
    )
    lr: float = Field(1e-4, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    warmup_steps: int = Field(2, ge=0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    checkpoint_every: int = Field(5, ge=1)
    judge_weight: float = Field(
        0.0, ge=0.0, description="Weight of the Claude judge term (0 = off)."
    )


class SmokeParams(Section):
    steps: int = Field(2, ge=1)
    problems: int = Field(2, ge=1)


class EvalParams(Section):
    n_samples: int = Field(4, ge=1, description="Samples per problem.")
    ks: list[int] = Field([1, 3, 5, 10], min_length=1)
    bootstrap: int = Field(1000, ge=10, description="Bootstrap resamples for the 95% CIs.")
    single_model: str = Field("", description="Model for the single baseline ('' = model.name).")
    backend: Literal["local", "claude"] = Field("local", description="claude = API agents.")

    @model_validator(mode="after")
    def _positive_ks(self) -> EvalParams:
        if any(k < 1 for k in self.ks):
            raise ValueError(f"ks must be >= 1, got {self.ks}")
        return self


class SchemesParams(Section):
    windows: int = Field(4, ge=1, description="Training windows for the scheme evolution.")


class FiguresParams(Section):
    smoothing: int = Field(
        5, ge=1, description="Moving-average window for training curves (steps)."
    )


class AnthropicParams(Section):
    model: str = "claude-sonnet-4-5"
    max_tokens: int = Field(1024, ge=1)
    base_url: str = Field("", description="'' = the SDK default endpoint.")
    timeout_s: float = Field(60.0, gt=0.0)
    max_attempts: int = Field(5, ge=1)
    budget_usd: float = Field(5.0, ge=0.0, description="Hard limit in dollars per run.")
    prices: dict[str, list[float]] = Field(
        {
            "claude-sonnet-4-5": [3.0, 15.0],
            "claude-haiku-4-5": [1.0, 5.0],
            "claude-opus-4-1": [15.0, 75.0],
        },
        description="model -> [input $/Mtok, output $/Mtok].",
    )
    cache: bool = True


class Params(Section):
    seed: int = Field(0, ge=0)
    model: ModelParams = ModelParams()
    sampling: SamplingParams = SamplingParams()
    sandbox: SandboxParams = SandboxParams()
    prepare: PrepareParams = PrepareParams()
    reward: RewardParams = RewardParams()
    train: TrainParams = TrainParams()
    smoke: SmokeParams = SmokeParams()
    evaluate: EvalParams = EvalParams()
    schemes: SchemesParams = SchemesParams()
    figures: FiguresParams = FiguresParams()
    anthropic: AnthropicParams = AnthropicParams()


class ParamsError(ValueError):
    """A params file that does not match the schema; the message is one line."""


def _allowed(model: type[BaseModel] | None) -> str:
    return ", ".join(model.model_fields) if model is not None else ""


def _section_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that owns the key at `loc` (for listing allowed keys)."""
    model: type[BaseModel] | None = Params
    for part in loc[:-1]:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
    return model


def _one_line(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    loc = tuple(first["loc"])
    path = ".".join(str(p) for p in loc) or "(top level)"
    if first["type"] == "extra_forbidden":
        owner = _section_at(loc)
        allowed = f"; allowed keys: {_allowed(owner)}" if owner is not None else ""
        return f"{source}: unknown key '{path}'{allowed}"
    got = first.get("input")
    shown = "" if isinstance(got, dict) else f" (got {got!r})"
    more = f" [+{len(err.errors()) - 1} more]" if len(err.errors()) > 1 else ""
    return f"{source}: {path}: {first['msg']}{shown}{more}"


def parse_params(data: Any, source: str = "params.yaml") -> Params:
    """Validate a loaded params mapping; raise ParamsError with one line on any problem."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: the top level must be a mapping of sections")
    try:
        return Params.model_validate(data)
    except ValidationError as err:
        raise ParamsError(_one_line(err, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Read and validate params.yaml."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: no such params file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParamsError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return parse_params(data, str(path))


def json_schema() -> dict[str, Any]:
    """The JSON schema Snakemake validates params.yaml against."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Params.model_json_schema()}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
