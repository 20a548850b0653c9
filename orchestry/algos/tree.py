"""The joint-action tree over any `Env` and `Generator`: sampled, scored, returns backed up.

Turn 1: for every task each agent samples G completions in one batched generate call; the environment
turns each completion into an action. Joint actions are formed `aligned` (the g-th samples of every
agent form joint action g) or `cross` (every combination) and scored by the environment in one batch.
For T > 1 turns, every joint action that has not reached `early_stop_reward` is a node that is expanded
the same way, each agent's next observation being its own history plus the environment's feedback on
that node. Returns flow back up the tree, R_t = r_t + gamma * mean(children's R_{t+1})
(`magrpo.turn_return`), and each agent's G samples at a node form one advantage group, valued by the
mean return of the joint actions they took part in.

Per-agent credit (`credit_weight` w > 0, a lever beyond the paper, in the spirit of COMA's
counterfactual baselines / difference rewards): each agent's sample is also scored next to the
environment's reference partners, and its value becomes (1 - w) * joint value + w * that reward, so
a helper is credited for being right even when main was wrong, and main for using a right aux.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestry.agents.base import Generator, SamplingSpec
from orchestry.algos.magrpo import turn_return
from orchestry.envs.base import Env, Outcome, Turn, acts_in_order
from orchestry.joint.turn import Answer, Ask, answer_turn

# expert(task, action by agent, notes) -> advice by agent, or None when the call failed
ExpertFn = Callable[[Any, dict[str, str], str], dict[str, str] | None]
# judge(task, action by agent) -> score in [0, 1], or None when the call failed
JudgeFn = Callable[[Any, dict[str, str]], float | None]


@dataclass(frozen=True)
class RolloutSettings:
    group_size: int
    turns: int
    gamma: float
    joint_mode: str
    early_stop_reward: float  # 0 = never stop early
    judge_weight: float
    expert_feedback: bool  # each expansion asks the expert for advice (expert_edits feedback)
    credit_weight: float  # 0 = the paper's joint value only


@dataclass
class Sample:
    """One agent's completion at one node."""

    agent: str
    history: tuple[Turn, ...]
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    action: str
    credit: float | None = None  # reward next to reference partners (per-agent credit)
    continuations: tuple[tuple[list[int], list[int]], ...] = ()
    """With tools on: each later segment's (prompt ids, token ids), the prompt holding the tool's
    result (`joint/tool_turn.py`); the update trains on every segment with the sample's advantage."""
    tools: tuple[dict[str, str], ...] | None = None
    """The tool calls of the turn: name, argument, result (the episode record); None: tools off."""


@dataclass
class JointNode:
    """One joint action: the samples of every agent, its outcome, and its subtree."""

    task: Any
    turn: int
    samples: dict[str, Sample]
    outcome: Outcome
    judge: float | None = None
    children: list[JointNode] = field(default_factory=list)
    ret: float = 0.0

    @property
    def total(self) -> float:
        return self.outcome.total

    def actions(self) -> dict[str, str]:
        return {a: s.action for a, s in self.samples.items()}

    def tool_record(self) -> dict[str, Any]:
        """`{"tools": each agent's calls}` with tools on, else {} (so runs without tools write
        the rows they always did)."""
        if all(s.tools is None for s in self.samples.values()):
            return {}
        return {"tools": {a: list(s.tools or ()) for a, s in self.samples.items()}}


@dataclass
class AgentGroup:
    """One agent's G samples at one node expansion, with their values (for group advantages)."""

    agent: str
    turn: int
    samples: list[Sample]
    members: list[list[JointNode]]  # for sample i, the joint actions it took part in
    credit_weight: float

    def values(self) -> list[float]:
        joint = [sum(n.ret for n in nodes) / len(nodes) for nodes in self.members]
        w = self.credit_weight
        if w == 0 or any(s.credit is None for s in self.samples):
            return joint
        return [(1 - w) * v + w * s.credit for v, s in zip(joint, self.samples, strict=True)]


@dataclass
class Rollout:
    roots: list[JointNode]
    nodes: list[JointNode]
    groups: list[AgentGroup]
    gen_seconds: float
    new_tokens: int

    def drop_details(self) -> None:
        """Drop each outcome's `detail` (e.g. the sandbox report) before the rollout leaves its
        process: the receiving rank reads records and metrics only."""
        for node in self.nodes:
            node.outcome = replace(node.outcome, detail=None)


@dataclass
class _Frontier:
    task: Any
    parent: JointNode | None
    histories: dict[str, tuple[Turn, ...]]


def _joint_indices(mode: str, n_agents: int, g: int) -> list[tuple[int, ...]]:
    if mode == "aligned":
        return [(i,) * n_agents for i in range(g)]
    if mode == "cross":
        return list(itertools.product(range(g), repeat=n_agents))
    raise ValueError(f"unknown joint_mode {mode!r}; use aligned or cross")


def rollout(
    policy: Generator,
    env: Env,
    tasks: Sequence[Any],
    sampling: SamplingSpec,
    settings: RolloutSettings,
    expert: ExpertFn | None = None,
    judge: JudgeFn | None = None,
) -> Rollout:
    """Expand the joint-action tree of every task for `settings.turns` turns and compute returns."""
    return start_rollout(policy, env, tasks, sampling, settings, expert, judge).finish()


def start_rollout(
    policy: Generator,
    env: Env,
    tasks: Sequence[Any],
    sampling: SamplingSpec,
    settings: RolloutSettings,
    expert: ExpertFn | None = None,
    judge: JudgeFn | None = None,
) -> StartedRollout:
    """The first turn generated; `finish()` scores it and expands the later turns.

    With one turn, `finish` calls no model: it may run on another thread while the model
    generates (the train loop's rollouts ahead, `algos/rollout_queue.py`)."""
    if settings.expert_feedback and settings.turns > 1 and expert is None:
        raise ValueError("feedback mode expert_edits needs the Claude expert (anthropic section)")
    started = StartedRollout(policy, env, sampling, settings, expert, judge)
    agents = env.roles.agents
    if tasks:
        started.generate([_Frontier(t, None, {a: () for a in agents}) for t in tasks])
    return started


class StartedRollout:
    """A joint-action tree being built: turn by turn, generated (`generate`), then scored."""

    def __init__(
        self,
        policy: Generator,
        env: Env,
        sampling: SamplingSpec,
        settings: RolloutSettings,
        expert: ExpertFn | None,
        judge: JudgeFn | None,
    ) -> None:
        self.policy, self.env, self.sampling, self.settings = policy, env, sampling, settings
        self.expert, self.judge = expert, judge
        self.roots: list[JointNode] = []
        self.nodes: list[JointNode] = []
        self.groups: list[AgentGroup] = []
        self.gen_seconds, self.new_tokens, self.turn = 0.0, 0, 0
        self._frontier: list[_Frontier] = []
        self._sampled: list[dict[str, list[Sample]]] = []

    def generate(self, frontier: list[_Frontier]) -> None:
        """Sample the next turn's actions at every frontier node: each agent's G samples, agents
        at once or, in a sequential env, in role order (`joint.turn.answer_turn`)."""
        self.turn += 1
        env, settings = self.env, self.settings
        if acts_in_order(env) and settings.joint_mode != "aligned":
            raise ValueError("an environment whose agents act in order needs joint_mode aligned")
        leaves = _joint_indices(settings.joint_mode, len(env.roles.agents), settings.group_size)
        asks = [Ask(f.task, f.histories, leaves) for f in frontier]
        answered = answer_turn(self.policy, env, asks, self.sampling)
        self.gen_seconds += answered.seconds
        self.new_tokens += answered.new_tokens
        per_task = [
            {a: [_sample(f, x) for x in answers] for a, answers in by_agent.items()}
            for f, by_agent in zip(frontier, answered.answers, strict=True)
        ]
        self._frontier, self._sampled = frontier, per_task

    def finish(self) -> Rollout:
        """Score the generated turn, expand and generate the later turns, and back returns up."""
        settings = self.settings
        while True:
            frontier = self._score()
            if not frontier or self.turn >= settings.turns:
                break
            self.generate(frontier)
        for node in reversed(self.nodes):  # children are always appended after their parents
            bonus = settings.judge_weight * node.judge if node.judge is not None else 0.0
            node.ret = turn_return(
                node.total + bonus, [c.ret for c in node.children], settings.gamma
            )
        return Rollout(self.roots, self.nodes, self.groups, self.gen_seconds, self.new_tokens)

    def _score(self) -> list[_Frontier]:
        """Score this turn's joint actions; the frontier of the next turn (empty after the last)."""
        env, settings, turn = self.env, self.settings, self.turn
        if not self._frontier:
            return []
        agents, g = env.roles.agents, settings.group_size
        pending: list[tuple[_Frontier, dict[str, list[Sample]], list[dict[str, Sample]]]] = []
        for f, per_agent in zip(self._frontier, self._sampled, strict=True):
            combos = [
                {a: per_agent[a][idx[ai]] for ai, a in enumerate(agents)}
                for idx in _joint_indices(settings.joint_mode, len(agents), g)
            ]
            pending.append((f, per_agent, combos))
        batch = [
            (f.task, {a: s.action for a, s in c.items()})
            for f, _, combos in pending
            for c in combos
        ]
        outcomes = iter(env.score(batch))
        if settings.credit_weight > 0:
            _score_with_reference_partners(env, [(f.task, per) for f, per, _ in pending])
        next_frontier: list[_Frontier] = []
        for f, per_agent, combos in pending:
            children = []
            for combo in combos:
                node = JointNode(f.task, turn, combo, next(outcomes))
                if self.judge is not None and settings.judge_weight > 0:
                    node.judge = self.judge(f.task, node.actions())
                children.append(node)
            self.nodes.extend(children)
            (f.parent.children if f.parent else self.roots).extend(children)
            for a in agents:
                members = [[n for n in children if n.samples[a] is s] for s in per_agent[a]]
                self.groups.append(
                    AgentGroup(a, turn, per_agent[a], members, settings.credit_weight)
                )
            if turn < settings.turns:
                for node in children:
                    if settings.early_stop_reward > 0 and node.total >= settings.early_stop_reward:
                        continue
                    next_frontier.append(_expand(node, env, settings, self.expert))
        self._frontier, self._sampled = [], []
        return next_frontier


def _sample(f: _Frontier, answer: Answer) -> Sample:
    gen = answer.generation
    return Sample(
        answer.agent,
        f.histories[answer.agent],
        answer.text,
        gen.prompt_ids,
        gen.token_ids[answer.k],
        answer.action,
        continuations=tuple(
            (s.generation.prompt_ids, s.generation.token_ids[s.k]) for s in answer.steps or ()
        ),
        tools=None if answer.steps is None else tuple(answer.tool_record() or ()),
    )


def _score_with_reference_partners(
    env: Env, per_task: list[tuple[Any, dict[str, list[Sample]]]]
) -> None:
    """Set each sample's `credit`: its reward next to the reference partners (None without them)."""
    batch, owners = [], []
    for task, per_agent in per_task:
        refs = {a: env.reference(task, a) for a in per_agent}
        for a, samples in per_agent.items():
            partners = {b: r for b, r in refs.items() if b != a}
            if any(r is None for r in partners.values()):
                continue
            for s in samples:
                batch.append((task, {**partners, a: s.action}))
                owners.append(s)
    for sample, outcome in zip(owners, env.score(batch) if batch else [], strict=True):
        sample.credit = outcome.total


def _expand(
    node: JointNode, env: Env, settings: RolloutSettings, expert: ExpertFn | None
) -> _Frontier:
    advice: dict[str, str] | None = None
    if settings.expert_feedback and expert is not None:
        advice = expert(node.task, node.actions(), node.outcome.notes)
    histories = {
        a: (
            *s.history,
            Turn(s.text, env.feedback(node.outcome, a, advice.get(a) if advice else None)),
        )
        for a, s in node.samples.items()
    }
    return _Frontier(node.task, node, histories)
