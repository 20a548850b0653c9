"""The `train` and `sft` sections of params.yaml: MAGRPO training, its loop and its processes; the
supervised warm start before it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from orchestry.params.section import Section


class TrainParams(Section):
    """MAGRPO training (one AdamW optimizer per adapter)."""

    epochs: int = Field(2, ge=1, description="Passes over the train split.")
    max_steps: int = Field(
        14,
        ge=0,
        description="Stop after this many steps (0 = run all epochs); 14 steps keep `make repro` "
        "within 25 minutes on 2 cores (team ~28 s a step, single agent ~18 s; docs/findings.md).",
    )
    problems_per_step: int = Field(2, ge=1, description="Problems per MAGRPO step.")
    group_size: int = Field(4, ge=2, description="G: samples per agent at each node.")
    turns: int = Field(1, ge=1, le=4, description="Turns of the multi-turn tree (1 = single turn).")
    gamma: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Discount of child returns across turns (0 = only the node's own reward).",
    )
    early_stop_reward: float = Field(
        0.0, ge=0.0, description="Do not expand a node with reward >= this (0 = off)."
    )
    joint_mode: Literal["aligned", "cross"] = Field(
        "aligned",
        description="Joint actions: `aligned` (the g-th samples of all agents form joint action g) "
        "or `cross` (all combinations, G^agents per node).",
    )
    feedback: Literal["level_feedback", "plain", "expert_edits"] = Field(
        "level_feedback",
        description="Next-turn feedback (turns > 1): `level_feedback`, `plain` or "
        "`expert_edits` (Claude).",
    )
    advantage_mode: Literal["mean", "rloo", "max", "raw"] = Field(
        "mean",
        description="Group baseline: `mean` (A = R - group mean), `rloo` (leave-one-out mean), "
        "`max` (A = R - group max) or `raw` (A = R).",
    )
    normalize: bool = Field(
        False, description="Divide advantages by the group std (at least `std_floor`)."
    )
    std_floor: float = Field(1e-2, gt=0.0, description="Smallest std used by `normalize`.")
    logprob_reduction: Literal["sum", "token_mean"] = Field(
        "token_mean",
        description="Sequence log-prob in the loss: `sum` over tokens or `token_mean` "
        "(divided by the completion's length).",
    )
    kl_coef: float = Field(
        0.0, ge=0.0, description="Reference-KL (k3) weight; 0 = off, as in the paper."
    )
    lr: float = Field(2e-4, gt=0.0, description="AdamW learning rate (peak, after warm-up).")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay (0 = none).")
    grad_clip: float = Field(1.0, gt=0.0, description="Gradient-norm clip per adapter.")
    warmup_steps: int = Field(
        2, ge=0, description="Steps of linear learning-rate warm-up (0 = none)."
    )
    schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="Learning rate after warm-up: constant, or decaying to 0 at the last step.",
    )
    microbatch: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="Rows per forward/backward pass in the update (memory vs. speed; the "
        "step's gradient is the same for any value up to float rounding). `auto` = 8 on a CPU, "
        "on a GPU the most rows (of 64, 32, 16, ...) that fit the card beside the weights, the "
        "decode cache and the update's CUDA-graph pools, by the model's size and the rows' length "
        "(agents/lora/cuda/memory_plan.py: 64 for the embedded model, 16 for a 3B one on 140 GB; "
        "H100, embedded model: update 0.9 s at 64 against 4.5 s at 8). On a GPU every "
        "adapter's rows share the passes, each pass at most 512 padded tokens a row.",
    )
    checkpoint_every: int = Field(
        5, ge=1, description="Steps between checkpoints (a killed run resumes from the last one)."
    )
    rollouts_ahead: int = Field(
        0,
        ge=0,
        le=4,
        description="Steps generated before the update that precedes them, a worker thread scoring "
        "the earlier ones (0 = the paper's on-policy loop): a GPU generates while programs run. "
        "An update then learns from samples of adapters up to this many updates old. Never "
        "across a checkpoint (a resumed run takes the same rollouts). Needs `turns: 1`.",
    )
    processes: PositiveInt = Field(
        1,
        description="Data-parallel training processes, one per GPU: each rolls out its share of a "
        "step's problems, the adapters' gradients are summed. Above 1, `python -m orchestry train` "
        "starts them itself (torch.distributed.run); under `torchrun` its `--nproc_per_node` "
        "counts, and a value above 1 must equal it. At most `problems_per_step`; each process's "
        "`sandbox.workers: auto` gets its share of the cores. A run resumes at any count.",
    )
    parallel: Literal["data", "pipeline"] = Field(
        "data",
        description="How `processes` > 1 share a step: `data`, each process rolls out its share of "
        "the problems and the gradients are summed; `pipeline`, exactly 2 processes, the second "
        "generates and scores every step while the first updates on the step before (needs "
        "`rollouts_ahead` >= 1: the samples, rollouts and adapters are one process's at the same "
        "`rollouts_ahead`; a step takes the longer of generation and update, not their sum).",
    )
    judge_weight: float = Field(
        0.0, ge=0.0, description="Weight of the Claude cooperation-judge term (0 = off)."
    )
    credit_weight: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Per-agent credit: each sample's value mixes the joint return (1 - w) with its "
        "reward next to reference partners (w); 0 = the paper's joint return only.",
    )
    curriculum: Literal["none", "by_grade", "easy_first"] = Field(
        "none",
        description="Problem order: `none` (the seeded permutation per epoch); `by_grade`: each "
        "epoch's permutation stably sorted by the problems' difficulty grade (trivial, easy, "
        "medium, hard; hand-written problems say theirs, HumanEval's count as medium); or "
        "`easy_first`: the "
        "first epoch as `none`, then each step draws `problems_per_step` distinct problems, seeded "
        "by (seed, step), with weight success + 0.05, success = mean test pass rate of the "
        "problem's first-turn joint actions at its last 2 visits; a mastered problem (success >= "
        "`curriculum_promote`) weighs 0.05. Same number of steps; a resumed run draws the same.",
    )
    curriculum_promote: float = Field(
        0.75,
        gt=0.0,
        le=1.0,
        description="`easy_first`: the success at which a problem counts as mastered and drops back.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TrainParams:
        if self.processes > self.problems_per_step:
            raise ValueError(
                f"processes ({self.processes}) must be at most problems_per_step "
                f"({self.problems_per_step}): each process rolls out whole problems"
            )
        if self.rollouts_ahead and self.turns > 1:
            raise ValueError(
                f"rollouts_ahead ({self.rollouts_ahead}) needs turns 1, got turns {self.turns}: "
                "a later turn is generated from the earlier turn's scores"
            )
        if self.parallel == "pipeline":
            if self.processes > 2:
                raise ValueError(
                    f"parallel pipeline runs on 2 processes (one generates, one updates), got "
                    f"processes {self.processes}"
                )
            if not self.rollouts_ahead:
                raise ValueError(
                    "parallel pipeline needs rollouts_ahead >= 1: the generating process works on "
                    "the next step while the other updates"
                )
            if self.curriculum == "easy_first":
                raise ValueError(
                    "parallel pipeline cannot draw an easy_first curriculum: its next problems "
                    "depend on the scores of the step being updated; use none or by_grade"
                )
        return self


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
        4,
        ge=0,
        description="Training problems taught, the first of the training split (0 = all); "
        "problems without a reference for every role are left out.",
    )
