"""The `prompt_policy` and `beam` sections of params.yaml: methods for teams whose weights do not change.

- `prompt_policy` learns each agent's system prompt on the train split (algos/prompt_policy.py, on
  GEPA's engine): a reflector reads the best and worst episodes and proposes instructions, kept on a
  Pareto front.
- `beam` searches joint multi-turn trajectories on the test split (algos/beam.py), against best-of-M
  sampling at the same number of generated completions.

Both run with the local base model (untrained adapters) or, with `evaluate.backend: claude`, Claude.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestry.params.section import Section


class PromptPolicyParams(Section):
    """Prompt-as-policy learning on the train split; the learned prompts are evaluated on the test split."""

    rounds: int = Field(3, ge=1, description="Reflection rounds (one proposed edit per round).")
    minibatch: int = Field(2, ge=1, description="Train tasks each round's parent and child run on.")
    samples: int = Field(2, ge=1, description="Joint samples per task in each episode batch.")
    pareto_tasks: int = Field(
        3, ge=1, description="Train tasks every accepted candidate is scored on (the Pareto set)."
    )
    explore: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Chance of taking a member of GEPA's per-task Pareto front as the parent, not "
        "the best mean.",
    )
    max_rules: int = Field(3, ge=1, description="Most learned instructions kept per agent.")
    reflector: Literal["local", "claude"] = Field(
        "local",
        description="Who reflects: the local base model, or Claude through the `anthropic` client.",
    )
    reflect_tokens: int = Field(
        96, ge=8, description="Most new tokens of one reflection (the proposed instructions)."
    )


class BeamParams(Section):
    """Beam search over joint multi-turn trajectories on the test split, and best-of-M at its budget."""

    width: int = Field(2, ge=1, description="N: joint trajectories kept after each turn.")
    k: int = Field(2, ge=1, description="Samples per agent for each kept trajectory and turn.")
    turns: int = Field(
        2, ge=1, le=4, description="Most turns; later turns revise with the environment's feedback."
    )
    success: float | None = Field(
        None,
        description="Stop a task's search once a candidate's reward reaches this (null: never; "
        "4.0 is the code task's full reward).",
    )
    feedback: Literal["level_feedback", "plain"] = Field(
        "level_feedback",
        description="What a later turn is told about the earlier one (as `train.feedback`).",
    )
    max_joint: int = Field(
        8, ge=1, description="Most joint candidates scored per kept trajectory and turn."
    )
    searches: int = Field(
        1, ge=1, description="Independent searches per test task (the rows' samples)."
    )
    judge_weight: float = Field(
        0.0,
        ge=0.0,
        description="Weight of Claude's judge of a joint answer in the value candidates are ranked "
        "by (beam and best-of-M alike): reward + weight x score in [0, 1]; 0 = off (the "
        "environment's reward alone). The rows' return stays the reward.",
    )
