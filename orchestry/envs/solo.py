"""One model alone on a team's task, seen as an `Env` with one agent: the trained single agent.

The untrained single-model baseline (`eval/protocols.single`) asks a `BaselineEnv` for its two
single-model views: `solo_observe` (the whole task as one prompt) and `solo_act` (one completion as
the team's joint action). `SoloEnv` turns those views into the five-member contract, so the training
loop (`stages/train.train_loop` over `algos/tree.py`) trains one adapter on the same task, with the
same reward, exactly as it trains the team: the paper's "single fine-tuned" baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestry.envs.base import BaselineEnv, Messages, Outcome, Roles, Turn, with_history

SOLO_AGENT = "single"
"""The lone agent's name (its adapter's name; the untrained baseline's generator uses it too)."""


class SoloEnv:
    """A `BaselineEnv`'s single-model view as an `Env` whose one agent is the main role."""

    sequential = False  # one agent: nothing to act in order, even when the team's env does

    def __init__(self, team: BaselineEnv, agent: str = SOLO_AGENT) -> None:
        self.team = team
        self.roles = Roles(helpers=(), main=agent)

    def observe(self, task: Any, agent: str, history: Sequence[Turn] = ()) -> Messages:
        """The whole task as one model alone is given it, then the agent's earlier turns."""
        self._check(agent)
        return with_history(self.team.solo_observe(task), history)

    def act(self, task: Any, agent: str, text: str) -> str:
        """The completion itself. It becomes the team's joint action in `score` (`solo_act`):
        an action is one string, and a lone answer may fill several roles (a story's parts)."""
        self._check(agent)
        return text

    def score(self, batch: Sequence[tuple[Any, Mapping[str, str]]]) -> list[Outcome]:
        """Each lone answer scored as the team's joint action, all in one batch of the team env."""
        agent = self.roles.main
        joint = [(task, self.team.solo_act(task, actions[agent])) for task, actions in batch]
        return self.team.score(joint)

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        """The feedback the team's main agent (the one who integrates) gets on the outcome."""
        self._check(agent)
        return self.team.feedback(outcome, self.team.roles.main, advice)

    def reference(self, task: Any, agent: str) -> str | None:
        """None: a lone agent has no partners to be scored next to (no per-agent credit)."""
        self._check(agent)
        return None

    def _check(self, agent: str) -> None:
        if agent != self.roles.main:
            raise ValueError(
                f"unknown agent {agent!r}: the single-agent view has only {self.roles.main!r}"
            )
