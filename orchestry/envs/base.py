"""The environment contract: what a team works on, seen only through these members.

The rollout tree (`algos/tree.py`) and the evaluation protocols (`eval/protocols.py`) drive any
environment through `Env`; a new task (a story, a code review) is a new folder under `envs/` with a
class that has these members and passes `check_env` (tests/envs/test_contract.py runs it for every
environment).

An episode is stateless from the environment's side: an agent's observation is rebuilt from the task
and the agent's own `history` (its earlier answers, each with the feedback it got), so the tree can
branch any node without copying environment state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeGuard

Messages = list[dict[str, str]]
"""Chat messages: dicts with `role` (system/user/assistant) and `content`."""


@dataclass(frozen=True)
class Roles:
    """Agent names: the helpers (in the task's order) and the main agent, who integrates (last)."""

    helpers: tuple[str, ...]
    main: str

    @classmethod
    def from_agents(cls, agents: Sequence[str]) -> Roles:
        return cls(helpers=tuple(agents[:-1]), main=agents[-1])

    @property
    def agents(self) -> tuple[str, ...]:
        return (*self.helpers, self.main)


@dataclass(frozen=True)
class Turn:
    """One earlier turn of an agent: what it answered and the feedback it received."""

    response: str
    feedback: str


@dataclass(frozen=True)
class Outcome:
    """The environment's verdict on one joint action."""

    total: float
    """The scalar reward the team is trained on."""
    metrics: dict[str, float]
    """Numbers training logs per step (averaged over the step's first-turn joint actions)."""
    record: dict[str, Any]
    """JSON-able facts kept with the sample in rollouts and generations (metrics read these)."""
    notes: str = ""
    """What went right and wrong, in words: the base of `feedback`."""
    detail: Any = field(default=None, compare=False, repr=False)
    """Anything else the environment keeps for itself (e.g. the sandbox report)."""


def with_history(messages: Messages, history: Sequence[Turn]) -> Messages:
    """A first observation extended by the agent's earlier turns: its answer, then the feedback."""
    for turn in history:
        messages = [
            *messages,
            {"role": "assistant", "content": turn.response},
            {"role": "user", "content": turn.feedback},
        ]
    return messages


class Env(Protocol):
    """A cooperative task for a team of agents (a Dec-POMDP seen through chat)."""

    roles: Roles
    sequential: ClassVar[bool]
    """The turn protocol, declared on the class: False, the agents answer a turn at once, each on
    its own observation; True, they answer in role order (the class is then a `SequentialEnv`)."""

    def observe(self, task: Any, agent: str, history: Sequence[Turn] = ()) -> Messages:
        """The agent's observation of `task` after its earlier turns."""
        ...

    def act(self, task: Any, agent: str, text: str) -> str:
        """The action an agent's completion amounts to (e.g. the code extracted from it)."""
        ...

    def score(self, batch: Sequence[tuple[Any, Mapping[str, str]]]) -> list[Outcome]:
        """Outcomes of many joint actions: (task, action by agent) each, scored in one batch."""
        ...

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        """The message that opens the agent's next turn (`advice`: an expert's note, if any)."""
        ...

    def reference(self, task: Any, agent: str) -> str | None:
        """A reference partner's action for `agent`'s role (None: the task has none). Used for
        per-agent credit: each agent's sample is also scored next to reference partners."""
        ...


class SequentialEnv(Env, Protocol):
    """An `Env` whose agents act in role order within a turn (a workflow: a writer drafts, a
    reviewer reads the draft, ...). The rollout tree and the team protocol then ask the agents
    one after another; joint actions are aligned (the g-th samples form joint action g).
    The class declares `sequential = True`."""

    def observe_after(
        self, task: Any, agent: str, earlier: Mapping[str, str], history: Sequence[Turn] = ()
    ) -> Messages:
        """`agent`'s observation with the earlier agents' actions of this turn (role order)."""
        ...


def acts_in_order(env: Env) -> TypeGuard[SequentialEnv]:
    """Whether the environment's agents answer a turn in role order (its declared protocol)."""
    return env.sequential


class BaselineEnv(Env, Protocol):
    """An `Env` that also offers the views the paper's baselines need (eval/protocols.py)."""

    def solo_observe(self, task: Any) -> Messages:
        """One model alone is given the whole task (single-model baseline)."""
        ...

    def solo_act(self, task: Any, text: str) -> dict[str, str]:
        """A lone model's completion as the team's joint action."""
        ...

    def observe_after_helpers(self, task: Any, helper_actions: Mapping[str, str]) -> Messages:
        """Main's first observation with the helpers' finished actions shown (sequential)."""
        ...

    def teammates_feedback(self, actions: Mapping[str, str], agent: str) -> str:
        """The message showing an agent its teammates' answers (one round of discussion)."""
        ...


def check_env(env: Env, task: Any, texts: Mapping[str, str]) -> list[Outcome]:
    """The contract every environment passes (with the agents' raw `texts` for one joint action).

    Observations are well-formed chats that grow with history, actions are strings, scores come
    back one per joint action with a finite total and JSON-able records, and feedback is text.
    Raises AssertionError naming the member that broke the contract; returns the outcomes.
    """
    import json
    import math

    assert any(isinstance(vars(c).get("sequential"), bool) for c in type(env).__mro__), (
        f"sequential: {type(env).__name__} must declare its turn protocol (sequential = True/False)"
    )
    agents = env.roles.agents
    assert len(set(agents)) == len(agents) >= 2, f"roles: need >= 2 distinct agents, got {agents}"
    assert set(texts) == set(agents), f"texts must name every agent {agents}"
    actions = {}
    for agent in agents:
        first = env.observe(task, agent)
        assert first and all(m.get("role") in {"system", "user", "assistant"} for m in first), (
            f"observe: {agent}'s first observation is not a chat"
        )
        assert first[-1]["role"] == "user", (
            f"observe: {agent}'s observation must end with a user turn"
        )
        actions[agent] = env.act(task, agent, texts[agent])
        assert isinstance(actions[agent], str), f"act: {agent}'s action is not a string"
    if acts_in_order(env):
        for i, agent in enumerate(agents[1:], start=1):
            earlier = {b: actions[b] for b in agents[:i]}
            seen = env.observe_after(task, agent, earlier)
            assert seen and seen[-1]["role"] == "user", (
                f"observe_after: {agent}'s observation must end with a user turn"
            )
            shown = "\n".join(m["content"] for m in seen)
            assert all(a.strip() in shown for a in earlier.values()), (
                f"observe_after: {agent} must see the earlier agents' actions"
            )
    outcomes = env.score([(task, actions), (task, {a: "" for a in agents})])
    assert len(outcomes) == 2, f"score: 2 joint actions gave {len(outcomes)} outcomes"
    for out in outcomes:
        assert math.isfinite(out.total), f"score: total {out.total} is not finite"
        assert all(math.isfinite(v) for v in out.metrics.values()), "score: non-finite metric"
        json.dumps(out.record)  # raises when a record is not JSON-able
    for agent in agents:
        ref = env.reference(task, agent)
        assert ref is None or isinstance(ref, str), f"reference: {agent}'s is not a string or None"
        text = env.feedback(outcomes[0], agent)
        assert isinstance(text, str) and text, f"feedback: empty feedback for {agent}"
        later = env.observe(task, agent, [Turn(texts[agent], text)])
        assert later[: len(env.observe(task, agent))] == env.observe(task, agent), (
            "observe: a later observation must extend the first"
        )
        assert later[-1] == {"role": "user", "content": text}, (
            "observe: the feedback must open the next turn"
        )
    return outcomes
