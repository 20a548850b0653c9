"""Rolling the team out on problems: the (multi-turn) tree of joint actions, scored and with returns.

Turn 1: for every problem each agent samples G completions in one batched generate call. Joint actions
are formed `aligned` (the g-th samples of every agent form joint action g) or `cross` (every
combination). Each joint program is scored in the sandbox. For T > 1 turns, every joint action that has
not reached `early_stop_reward` is a node that is expanded the same way, each agent's next observation
being its own conversation plus feedback on that node. Returns flow back up the tree,
R_t = r_t + gamma * mean(children's R_{t+1}) (see magrpo.turn_return), and each agent's G samples at a
node form one advantage group, valued by the mean return of the joint actions they took part in.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestry.agents.base import Generator, GenRequest, SamplingSpec
from orchestry.algos.magrpo import turn_return
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.prompts import (
    Roles,
    agent_code,
    diagnostics,
    feedback_message,
    initial_messages,
    next_messages,
)
from orchestry.envs.code.reward import (
    JointAction,
    RewardBreakdown,
    RewardWeights,
    score_joint_actions,
)
from orchestry.envs.code.sandbox.runner import SandboxLimits, TestReport

# expert(problem, code by agent, diagnostics) -> suggestion by agent, or None when the call failed
ExpertFn = Callable[[Problem, dict[str, str], str], dict[str, str] | None]
# judge(problem, code by agent) -> score in [0, 1], or None when the call failed
JudgeFn = Callable[[Problem, dict[str, str]], float | None]


@dataclass(frozen=True)
class RolloutSettings:
    group_size: int = 4
    turns: int = 1
    gamma: float = 1.0
    joint_mode: str = "aligned"
    feedback: str = "level_feedback"
    early_stop_reward: float = 0.0  # 0 = never stop early
    judge_weight: float = 0.0


@dataclass
class Sample:
    """One agent's completion at one node."""

    agent: str
    messages: list[dict[str, str]]
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    code: str


@dataclass
class JointNode:
    """One joint action: the samples of every agent, its reward, and its subtree."""

    problem: Problem
    turn: int
    samples: dict[str, Sample]
    reward: RewardBreakdown
    report: TestReport | None
    judge: float | None = None
    children: list[JointNode] = field(default_factory=list)
    ret: float = 0.0

    @property
    def total(self) -> float:
        return self.reward.total


@dataclass
class AgentGroup:
    """One agent's G samples at one node expansion, with their values (for group advantages)."""

    agent: str
    turn: int
    samples: list[Sample]
    members: list[list[JointNode]]  # for sample i, the joint actions it took part in

    def values(self) -> list[float]:
        return [sum(n.ret for n in nodes) / len(nodes) for nodes in self.members]


@dataclass
class Rollout:
    roots: list[JointNode]
    nodes: list[JointNode]
    groups: list[AgentGroup]
    gen_seconds: float
    new_tokens: int


@dataclass
class _Frontier:
    problem: Problem
    parent: JointNode | None
    histories: dict[str, list[dict[str, str]]]


def _joint_indices(mode: str, n_agents: int, g: int) -> list[tuple[int, ...]]:
    if mode == "aligned":
        return [(i,) * n_agents for i in range(g)]
    if mode == "cross":
        return list(itertools.product(range(g), repeat=n_agents))
    raise ValueError(f"unknown joint_mode {mode!r}; use aligned or cross")


def rollout(
    policy: Generator,
    problems: Sequence[Problem],
    roles: Roles,
    sampling: SamplingSpec,
    settings: RolloutSettings,
    weights: RewardWeights,
    limits: SandboxLimits,
    workers: int,
    expert: ExpertFn | None = None,
    judge: JudgeFn | None = None,
) -> Rollout:
    """Expand the joint-action tree of every problem for `settings.turns` turns and compute returns."""
    g = settings.group_size
    agents = roles.agents
    frontier = [
        _Frontier(p, None, {a: initial_messages(p, roles, a) for a in agents}) for p in problems
    ]
    roots: list[JointNode] = []
    nodes: list[JointNode] = []
    groups: list[AgentGroup] = []
    gen_seconds, new_tokens = 0.0, 0
    for turn in range(1, settings.turns + 1):
        if not frontier:
            break
        requests = [GenRequest(a, f.histories[a], g) for f in frontier for a in agents]
        start = time.perf_counter()
        gens = policy.generate(requests, sampling)
        gen_seconds += time.perf_counter() - start  # batched rows share the call's wall time
        new_tokens += sum(x.new_tokens for x in gens)
        pending: list[tuple[_Frontier, dict[str, Sample], list[dict[str, Sample]]]] = []
        for fi, f in enumerate(frontier):
            per_agent: dict[str, list[Sample]] = {}
            for ai, a in enumerate(agents):
                gen = gens[fi * len(agents) + ai]
                per_agent[a] = [
                    Sample(
                        a,
                        f.histories[a],
                        text,
                        gen.prompt_ids,
                        ids,
                        agent_code(text, f.problem, roles, a),
                    )
                    for text, ids in zip(gen.texts, gen.token_ids, strict=True)
                ]
            combos = [
                {a: per_agent[a][idx[ai]] for ai, a in enumerate(agents)}
                for idx in _joint_indices(settings.joint_mode, len(agents), g)
            ]
            pending.append((f, per_agent, combos))
        actions = [
            JointAction(f.problem, tuple(c[a].code for a in roles.helpers), c[roles.main].code)
            for f, _, combos in pending
            for c in combos
        ]
        scored = iter(score_joint_actions(actions, weights, limits, workers))
        next_frontier: list[_Frontier] = []
        for f, per_agent, combos in pending:
            children = []
            for combo in combos:
                reward, report = next(scored)
                node = JointNode(f.problem, turn, combo, reward, report)
                if judge is not None and settings.judge_weight > 0:
                    node.judge = judge(f.problem, {a: s.code for a, s in combo.items()})
                children.append(node)
            nodes.extend(children)
            (f.parent.children if f.parent else roots).extend(children)
            for a in agents:
                members = [[n for n in children if n.samples[a] is s] for s in per_agent[a]]
                groups.append(AgentGroup(a, turn, per_agent[a], members))
            if turn < settings.turns:
                for node in children:
                    if settings.early_stop_reward > 0 and node.total >= settings.early_stop_reward:
                        continue
                    next_frontier.append(_expand(node, roles, settings.feedback, expert))
        frontier = next_frontier
    for node in reversed(nodes):  # children are always appended after their parents
        bonus = settings.judge_weight * node.judge if node.judge is not None else 0.0
        node.ret = turn_return(node.total + bonus, [c.ret for c in node.children], settings.gamma)
    return Rollout(roots, nodes, groups, gen_seconds, new_tokens)


def _expand(node: JointNode, roles: Roles, mode: str, expert: ExpertFn | None) -> _Frontier:
    diag = diagnostics(node.problem, node.reward, node.report, node.samples[roles.main].code)
    suggestions: dict[str, str] | None = None
    if mode == "expert_edits":
        if expert is None:
            raise ValueError(
                "feedback mode expert_edits needs the Claude expert (anthropic section)"
            )
        suggestions = expert(node.problem, {a: s.code for a, s in node.samples.items()}, diag)
    histories = {
        a: next_messages(
            s.messages,
            s.text,
            feedback_message(mode, diag, suggestions.get(a) if suggestions else None),
        )
        for a, s in node.samples.items()
    }
    return _Frontier(node.problem, node, histories)
