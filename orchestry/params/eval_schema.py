"""The `evaluate` section of params.yaml: the test-split evaluation of the baselines and the team."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from orchestry.params.section import Section


class EvalParams(Section):
    """Evaluation of the baselines and the trained team on the test split."""

    n_samples: int = Field(4, ge=1, description="Samples per test problem (n of pass@k).")
    ks: list[int] = Field(
        [1, 3, 5, 10], min_length=1, description="pass@k is reported for each k <= n_samples."
    )
    bootstrap: int = Field(1000, ge=10, description="Bootstrap resamples for the 95% CIs.")
    single_model: str = Field(
        "", description="Model of the single-model baseline ('' = `model.name`)."
    )
    backend: Literal["local", "claude"] = Field(
        "local",
        description="`local` = the base model with adapters; `claude` runs the baselines' agents "
        "through the Anthropic API.",
    )
    adapters: Literal["trained", "warm_start"] = Field(
        "trained",
        description="The adapters `evaluate` and `evaluate_single` load: `trained` = after RL "
        "(`train`, `train_single`); `warm_start` = the `sft` stage's, before any RL.",
    )
    processes: PositiveInt = Field(
        1,
        description="Data-parallel evaluation processes, one per GPU, for `evaluate` and the "
        "baselines: process r takes test problems r, r + N, ... and samples with its own stream; "
        "rank 0 gathers the rows in the test split's order and writes. Above 1, the stage starts "
        "them itself (torch.distributed.run); under `torchrun` its `--nproc_per_node` counts, and "
        "a value above 1 must equal it. `local` backend only.",
    )

    @model_validator(mode="after")
    def _positive_ks(self) -> EvalParams:
        if any(k < 1 for k in self.ks):
            raise ValueError(f"ks must be >= 1, got {self.ks}")
        if self.processes > 1 and self.backend == "claude":
            raise ValueError(
                f"processes ({self.processes}) needs backend local: the Claude client keeps one "
                "budget and cache per process"
            )
        return self
