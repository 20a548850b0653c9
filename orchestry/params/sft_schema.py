"""The `sft` section of params.yaml: the supervised warm start before RL (stage `sft`, `algos/sft.py`)."""

from __future__ import annotations

from pydantic import Field

from orchestry.params.section import Section


class SftParams(Section):
    """The supervised warm start: LoRA fine-tuning of each agent on the training problems'
    reference solutions (the helper on its helper, main on the entry point, the single agent on
    the whole program), loss on the answer tokens only."""

    enabled: bool = Field(
        False,
        description="`train` and `train_single` (and `evaluate.adapters: warm_start`) start from "
        "the `sft` stage's adapters; false = from fresh adapters (the stage still runs).",
    )
    epochs: int = Field(1, ge=1, description="Passes over each agent's rows.")
    lr: float = Field(2e-4, gt=0.0, description="AdamW learning rate (constant).")
    batch_rows: int = Field(4, ge=1, description="Rows of one agent per optimizer step.")
    problems: int = Field(
        8,
        ge=0,
        description="Training problems taught, the first of the training split (0 = all); "
        "problems without a reference for every role are left out.",
    )
