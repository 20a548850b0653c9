"""The `orchestrate` section of params.yaml: a learned orchestrator over a pool of agents.

The opt-in stage `orchestrate` (optional/dvc.yaml; `snakemake orchestrate`) trains one policy per
cost weight λ with REINFORCE on r - λ·C (algos/orchestrator.py) over the pool of algos/agent_pool.py,
and compares it on the test split with fixed orders of the same pool.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from orchestry.params.section import Section


class OrchestrateParams(Section):
    """A learned orchestrator (Puppeteer): which agent acts next, or stop, trained per cost weight."""

    adapters: Literal["trained", "base"] = Field(
        "trained",
        description="The pool's agents: the MAGRPO-trained adapters (results/train/adapters) or "
        "the untrained base with the role prompts.",
    )
    tester: bool = Field(
        True,
        description="Add a tester to the pool: it scores the team's current joint action with the "
        "environment (the code task: the tests in the sandbox) and reports to the agents.",
    )
    cost_weights: list[float] = Field(
        [0.0, 0.001, 0.003],
        min_length=1,
        description="λ per token: one orchestrator is trained and evaluated per value "
        "(return = reward - λ·cost).",
    )
    tool_cost: float = Field(
        16.0, ge=0.0, description="Cost of one tester call, in tokens (its report is read)."
    )
    max_steps: int = Field(4, ge=1, description="Most agent calls per episode.")
    updates: int = Field(8, ge=1, description="REINFORCE updates per cost weight.")
    episodes: int = Field(
        4, ge=1, description="Episodes per update (train tasks in turn, run in lockstep)."
    )
    lr: float = Field(0.01, gt=0.0, description="Adam learning rate of the policy head.")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount per decision.")
    entropy_coef: float = Field(0.02, ge=0.0, description="Weight of the entropy bonus.")
    baseline_momentum: float = Field(
        0.8, ge=0.0, le=1.0, description="EMA momentum of the return baseline."
    )
    grad_clip: float = Field(1.0, gt=0.0, description="Max gradient norm of the head per update.")
    hidden: int = Field(64, ge=1, description="Hidden units of the policy head.")
    state_tokens: int = Field(
        384, ge=16, description="Most tokens of the state text the frozen base embeds."
    )
    state_chars: int = Field(
        300, ge=20, description="Characters of each call's text kept in the state text."
    )
    checkpoint_every: int = Field(
        2, ge=1, description="Updates between checkpoints (an interrupted run resumes)."
    )

    @field_validator("cost_weights")
    @classmethod
    def _non_negative(cls, value: list[float]) -> list[float]:
        if any(v < 0 for v in value) or len(set(value)) != len(value):
            raise ValueError(f"cost_weights must be distinct and >= 0, got {value}")
        return value
