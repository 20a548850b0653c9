"""One joint turn: the team answers a task, each agent on its observation, the env reading actions.

Every method that runs a team — the rollout tree (`algos/tree.py`), the evaluation's team protocol
(`eval/protocols.py`), the prompt policy's episodes, the beam search, the orchestrator's pool —
asks the agents through here, so the turn is written once:

1. each agent observes the task after its own earlier turns (`env.observe`); in an environment that
   declares `sequential = True` an agent after the first also sees the actions the earlier agents
   took in its joint candidate (`env.observe_after`);
2. the `Generator` generates: agents at once in one call (parallel), or one call per agent in role
   order (sequential);
3. `env.act` turns each completion into the agent's action.

With tools on (`tool_use` of the environment, docs/tools.md) step 2 is a loop, written in
`tool_turn.py`: a completion that ends in a tool call gets the result and is continued, and the
action is read from the agent's text outside its calls.

What is asked for is a set of joint candidates per task (`Ask.leaves`): leaf (i, j, ...) is the
joint action of the first agent's i-th sample, the second's j-th, ... An agent is asked for just the
samples some leaf uses; in a sequential env once per distinct choice of the earlier agents' samples
(a leaf prefix), since what it sees depends on them. Requests go out task-major, then by prefix
(in the leaves' order), then by agent in role order: the order fixes which random numbers a sampled
completion draws, so it must not change.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestry.agents.base import Generation, Generator, GenRequest, SamplingSpec
from orchestry.envs.base import Env, Messages, Turn, acts_in_order
from orchestry.envs.tools.registry import ToolUse
from orchestry.joint.tool_turn import ToolChain, ToolStep, run_tools, tool_sampling

Leaf = tuple[int, ...]
"""A joint candidate: the index of each agent's sample, in role order."""


def aligned(n: int, n_agents: int) -> list[Leaf]:
    """The n aligned joint candidates: the i-th samples of every agent form joint action i."""
    return [(i,) * n_agents for i in range(n)]


def observation(
    env: Env, task: Any, agent: str, earlier: Mapping[str, str], history: Sequence[Turn] = ()
) -> Messages:
    """`agent`'s observation in a joint turn: in a sequential env, with the actions the agents
    before it took in this turn (`earlier`, role order; none for the first agent)."""
    if earlier and acts_in_order(env):
        return env.observe_after(task, agent, earlier, history)
    return env.observe(task, agent, history)


@dataclass(frozen=True)
class Ask:
    """One task to answer a turn of: each agent's earlier turns, and the joint candidates wanted."""

    task: Any
    histories: Mapping[str, Sequence[Turn]]
    leaves: Sequence[Leaf]


@dataclass(frozen=True)
class Answer:
    """One agent's completion in a joint turn, and the action the environment reads from it."""

    agent: str
    index: int
    """Which of the agent's samples (the leaves' index for this agent)."""
    text: str
    action: str
    generation: Generation
    """The generation it came in (prompt ids, token ids, token counts)."""
    k: int
    """Its place among `generation.texts`."""
    steps: tuple[ToolStep, ...] | None = None
    """Its tool calls, each with the continuation generated after the result (`tool_turn.py`):
    `generation`/`k` is the first segment, `text` the final answer. None: tools are off."""

    def tool_record(self) -> list[dict[str, str]] | None:
        """The calls and results, as the episode record keeps them (None: tools are off)."""
        if self.steps is None:
            return None
        return [{"name": s.name, "argument": s.argument, "result": s.result} for s in self.steps]


@dataclass(frozen=True)
class Call:
    """One generate call of a turn: the ask each request was for, what came back, its wall time."""

    asks: list[int]
    requests: list[GenRequest]
    generations: list[Generation]
    seconds: float


@dataclass(frozen=True)
class JointTurn:
    """What the team answered, per ask (in the order asked)."""

    answers: list[dict[str, list[Answer]]]
    """Each agent's answers, in the order they were generated."""
    joint: list[dict[Leaf, dict[str, Answer]]]
    """Each leaf's answer by agent (role order); leaves sharing a sample share its `Answer`."""
    calls: list[Call]

    @property
    def seconds(self) -> float:
        return sum(c.seconds for c in self.calls)

    @property
    def new_tokens(self) -> int:
        return sum(g.new_tokens for c in self.calls for g in c.generations)


def tools_of(env: Env) -> ToolUse | None:
    """The tools the environment turns on (its `tool_use`; an optional member: None = none)."""
    return getattr(env, "tool_use", None)


def answer_turn(gen: Generator, env: Env, asks: Sequence[Ask], sampling: SamplingSpec) -> JointTurn:
    """Generate every ask's joint candidates (module doc): one generate call when the agents act at
    once, one per agent in role order in a sequential env."""
    agents = env.roles.agents
    in_order = acts_in_order(env)
    tool_use = tools_of(env)
    sampling = tool_sampling(sampling, tool_use)
    partial: list[dict[Leaf, dict[str, Answer]]] = [{(): {}} for _ in asks]
    answers: list[dict[str, list[Answer]]] = [{a: [] for a in agents} for _ in asks]
    calls: list[Call] = []
    for depth in range(len(agents)) if in_order else [0]:
        group = agents[depth : depth + 1] if in_order else agents
        owners: list[tuple[int, Leaf, str, list[int]]] = []
        requests: list[GenRequest] = []
        for i, ask in enumerate(asks):
            for prefix, done in partial[i].items():
                earlier = {b: done[b].action for b in agents[:depth]}
                for j, a in enumerate(group, start=depth):
                    needed = sorted({leaf[j] for leaf in ask.leaves if leaf[:depth] == prefix})
                    msgs = observation(env, ask.task, a, earlier, ask.histories[a])
                    owners.append((i, prefix, a, needed))
                    requests.append(GenRequest(a, msgs, len(needed)))
        start = time.perf_counter()
        gens = gen.generate(requests, sampling)
        seconds = time.perf_counter() - start  # batched rows share the call's wall time
        if len(gens) != len(requests):
            raise ValueError(f"generate: {len(requests)} requests gave {len(gens)} generations")
        calls.append(Call([o[0] for o in owners], requests, gens, seconds))
        for (_, _, a, needed), g in zip(owners, gens, strict=True):
            if len(g.texts) != len(needed):
                raise ValueError(f"asked {a} for {len(needed)} completions, got {len(g.texts)}")
        chains: list[list[ToolChain]] | None = None
        if tool_use is not None:
            tasks = [asks[o[0]].task for o in owners]
            chains, more = run_tools(gen, env, tool_use, tasks, requests, gens, sampling)
            calls += [Call([owners[r][0] for r in rs], q, g, t) for rs, q, g, t in more]
        sampled: dict[tuple[int, Leaf, str], dict[int, Answer]] = {}
        for r, ((i, prefix, a, needed), g) in enumerate(zip(owners, gens, strict=True)):
            task = asks[i].task
            finals = [c.final for c in chains[r]] if chains is not None else g.texts
            steps: list[tuple[ToolStep, ...] | None] = (
                [tuple(c.steps) for c in chains[r]] if chains is not None else [None] * len(finals)
            )
            mine = [
                Answer(a, idx, text, env.act(task, a, text), g, k, steps[k])
                for k, (idx, text) in enumerate(zip(needed, finals, strict=True))
            ]
            answers[i][a].extend(mine)
            sampled[(i, prefix, a)] = {x.index: x for x in mine}
        for i, ask in enumerate(asks):
            grown: dict[Leaf, dict[str, Answer]] = {}
            for leaf in ask.leaves:
                key = leaf[: depth + len(group)]
                if key not in grown:
                    prefix = leaf[:depth]
                    grown[key] = {
                        **partial[i][prefix],
                        **{
                            a: sampled[(i, prefix, a)][leaf[j]]
                            for j, a in enumerate(group, start=depth)
                        },
                    }
            partial[i] = grown
    return JointTurn(answers, partial, calls)
