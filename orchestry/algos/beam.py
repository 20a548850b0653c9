"""Beam search over joint multi-turn trajectories, and best-of-M sampling at an equal budget.

An inference-time method for a team that is not fine-tuned. At each turn every agent samples `k`
responses per expanded state; joint candidates are formed from them (every combination, cut to
`max_joint` with the aligned i-th samples first) and scored by the environment itself, the grounded
value (the code env runs the tests in the sandbox); the `width` best of the turn's candidates are kept
as the beam. Later turns revise: agent a in beam state s is asked again with its own history plus the
environment's feedback on s. A task stops once a candidate reaches `success`.

Optionally a judge adds to the grounded value: with `judge_weight` w > 0 and a judge (task, joint
action -> score in [0, 1], e.g. Claude), a candidate's value is `outcome.total + w * score` (an
unanswered judge counts 0); the beam and the best are kept by it. The early stop, the outcome and
the rows' return stay grounded: the judge ranks, it never changes a metric.

All tasks advance turn by turn together: one generate call per agent position (agents at once: one
call; a sequential env: one per agent in role order, each sample seeing the earlier agents' actions),
then ONE `env.score` call for every task's candidates (the sandbox runs the batch in parallel).

`best_of` is the baseline at the same budget: M independent joint samples per task drawn as the team
protocol draws them (aligned, or in role order), scored in one call, the best kept (by the same value,
judge included: the same verifier for both).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestry.agents.base import Generator, SamplingSpec
from orchestry.envs.base import Env, Outcome, Turn
from orchestry.joint.turn import Ask, Leaf, answer_turn

Histories = dict[str, tuple[Turn, ...]]
JointJudge = Callable[[Any, Mapping[str, str]], float | None]
"""(task, action by agent) -> a score in [0, 1] of how well the joint action solves the task, or
None when the judge gave no answer (counted as 0)."""


@dataclass(frozen=True)
class BeamSettings:
    width: int  # N: joint trajectories kept after each turn
    k: int  # samples per agent per expanded state and turn
    turns: int  # most turns (turn 1 from the task alone, later turns revise with feedback)
    success: float | None  # stop a task once a candidate's total >= this (None: never early)
    max_joint: int  # most joint candidates scored per expanded state
    seed: int  # drives the max_joint cut
    judge_weight: float = 0.0  # w: a candidate's value is total + w * judge score (0: total alone)

    def __post_init__(self) -> None:
        if min(self.width, self.k, self.turns, self.max_joint) < 1:
            raise ValueError(f"beam: width, k, turns and max_joint must be >= 1: {self}")
        if self.judge_weight < 0:
            raise ValueError(f"beam: judge_weight must be >= 0: {self}")


@dataclass
class Search:
    """The result for one task (one independent search)."""

    task: Any
    actions: dict[str, str]  # best joint action found (by value; ties: earliest)
    outcome: Outcome  # its outcome (from the same env.score call, not rescored)
    texts: dict[str, str]  # the agents' raw texts of that candidate's last turn
    turns: int  # turns used
    candidates: int  # joint candidates scored for this task
    completions: int  # completions generated for this task
    new_tokens: int  # tokens generated for this task
    seconds: float  # this task's share of generation wall time
    trace: list[dict[str, Any]]  # per turn: candidates scored, kept candidates' totals, best
    judge: float | None = None  # the judge's score of `actions` (None: not judged or no answer)
    value: float | None = None  # the value it was ranked by, total + w * judge (None: no judge)


@dataclass
class _State:
    """A scored joint candidate (a beam state), or a task's root (no outcome yet)."""

    history: Histories  # each agent's turns before this candidate's
    texts: dict[str, str]
    actions: dict[str, str]
    outcome: Outcome | None = None
    judge: float | None = None  # the judge's score (None: not judged, or no answer)
    value: float | None = None  # total + w * judge when judged (None: ranked by the total alone)

    def next_history(self, env: Env) -> Histories:
        """Each agent's history for revising this candidate: + its answer and the feedback."""
        if self.outcome is None:
            return self.history
        out = self.outcome
        return {a: (*h, Turn(self.texts[a], env.feedback(out, a))) for a, h in self.history.items()}


@dataclass
class _Progress:
    """One task's search so far."""

    task: Any
    beam: list[_State]
    best: _State | None = None
    turns: int = 0
    candidates: int = 0
    completions: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    trace: list[dict[str, Any]] = field(default_factory=list)
    top_total: float = float("-inf")  # the highest grounded total so far (the early stop's)
    done: bool = False

    def result(self) -> Search:
        best = self.best
        assert best is not None and best.outcome is not None
        return Search(
            self.task,
            best.actions,
            best.outcome,
            best.texts,
            self.turns,
            self.candidates,
            self.completions,
            self.new_tokens,
            self.seconds,
            self.trace,
            best.judge,
            best.value,
        )


@dataclass
class _Expansion:
    """One state expanded this turn: the joint candidates to sample, then those sampled."""

    owner: _Progress
    history: Histories
    leaves: list[Leaf]
    # per prefix of a leaf (agents in role order): the texts and actions sampled so far
    partial: dict[Leaf, tuple[dict[str, str], dict[str, str]]] = field(default_factory=dict)


def joint_leaves(k: int, n_agents: int, max_joint: int, rng: random.Random) -> list[Leaf]:
    """The joint candidates of one expanded state: the aligned i-th samples first, then (when
    `max_joint` allows more) other combinations of the k^A, all of them or a seeded sample."""
    aligned = [(i,) * n_agents for i in range(k)]
    if max_joint <= k:
        return aligned[:max_joint]
    total, extra = k**n_agents, max_joint - k
    if extra >= total - k:  # every combination fits
        codes: Sequence[int] = range(total)
    else:  # extra + k distinct codes hold at least `extra` that are not aligned
        codes = rng.sample(range(total), extra + k)
    others = [leaf for leaf in (_decode(c, k, n_agents) for c in codes) if len(set(leaf)) > 1]
    return aligned + sorted(others[:extra])


def _decode(code: int, k: int, n_agents: int) -> Leaf:
    digits = []
    for _ in range(n_agents):
        code, d = divmod(code, k)
        digits.append(d)
    return tuple(reversed(digits))


def _sample(gen: Generator, env: Env, expansions: list[_Expansion], sampling: SamplingSpec) -> None:
    """Sample every expansion's leaves (`joint.turn.answer_turn`: one generate call when the agents
    act at once; a sequential env: one per agent, its requests one per leaf prefix, seeing the
    earlier agents' actions). Each request asks for just the samples some leaf uses (<= k), so a cut
    degrades to aligned pairing without generating unused completions. Leaves `partial` keyed by
    the full leaves; each owner is charged its requests' completions, tokens and share of time."""
    asks = [Ask(e.owner.task, e.history, e.leaves) for e in expansions]
    turn = answer_turn(gen, env, asks, sampling)
    for call in turn.calls:
        rows = max(1, sum(len(g.texts) for g in call.generations))
        for i, g in zip(call.asks, call.generations, strict=True):
            owner = expansions[i].owner
            owner.completions += len(g.texts)
            owner.new_tokens += g.new_tokens
            owner.seconds += call.seconds * len(g.texts) / rows  # batched rows share the time
    for e, joint in zip(expansions, turn.joint, strict=True):
        e.partial = {
            leaf: ({a: x.text for a, x in by.items()}, {a: x.action for a, x in by.items()})
            for leaf, by in joint.items()
        }


def _turn(
    gen: Generator,
    env: Env,
    expansions: list[_Expansion],
    sampling: SamplingSpec,
    judge: JointJudge | None,
    judge_weight: float,
) -> dict[int, list[_State]]:
    """Sample and score one turn, and judge it when w > 0; returns each task's candidates (scored
    states, earliest first)."""
    _sample(gen, env, expansions, sampling)
    states: list[tuple[_Progress, _State]] = [
        (e.owner, _State(e.history, *e.partial[leaf])) for e in expansions for leaf in e.leaves
    ]
    outcomes = env.score([(p.task, s.actions) for p, s in states]) if states else []
    if len(outcomes) != len(states):
        raise ValueError(f"env.score: {len(states)} joint actions gave {len(outcomes)} outcomes")
    per_task: dict[int, list[_State]] = {}
    for (p, s), outcome in zip(states, outcomes, strict=True):
        s.outcome = outcome
        if judge is not None and judge_weight > 0:
            s.judge = judge(p.task, s.actions)
            s.value = outcome.total + judge_weight * (s.judge if s.judge is not None else 0.0)
        per_task.setdefault(id(p), []).append(s)
    return per_task


def _keep(p: _Progress, candidates: list[_State], width: int, turn: int, expanded: int) -> None:
    """The turn's `width` best candidates (by value) become the beam; the best so far is updated."""
    ranked = sorted(candidates, key=lambda s: -_value(s))  # stable: ties keep the earliest
    p.beam = ranked[:width]
    if p.best is None or _value(ranked[0]) > _value(p.best):
        p.best = ranked[0]
    p.top_total = max(p.top_total, *(_total(s) for s in candidates))
    p.turns = turn
    p.candidates += len(candidates)
    row: dict[str, Any] = {
        "turn": turn,
        "expanded": expanded,
        "candidates": len(candidates),
        "kept": [_total(s) for s in p.beam],
        "best": _total(p.best),
    }
    if ranked[0].value is not None:  # judged: the kept candidates' judge scores beside their totals
        row["judge"] = [s.judge for s in p.beam]
    p.trace.append(row)


def _total(s: _State) -> float:
    assert s.outcome is not None
    return s.outcome.total


def _value(s: _State) -> float:
    """What candidates are ranked by: the grounded total, plus the judge's term when judged."""
    return s.value if s.value is not None else _total(s)


def _check_judge(judge: JointJudge | None, judge_weight: float) -> None:
    if judge_weight > 0 and judge is None:
        raise ValueError(f"judge_weight {judge_weight} > 0 needs a judge; pass one or set it to 0")


def beam_search(
    gen: Generator,
    env: Env,
    tasks: Sequence[Any],
    settings: BeamSettings,
    sampling: SamplingSpec,
    judge: JointJudge | None = None,
) -> list[Search]:
    """One independent beam search per task, all tasks advancing turn by turn together; `judge`
    adds to the ranking value when `settings.judge_weight` > 0."""
    _check_judge(judge, settings.judge_weight)
    agents = env.roles.agents
    rng = random.Random(settings.seed)
    root = {a: () for a in agents}
    progress = [_Progress(t, [_State(dict(root), {}, {})]) for t in tasks]
    for turn in range(1, settings.turns + 1):
        active = [p for p in progress if not p.done]
        if not active:
            break
        expansions = [
            _Expansion(
                p,
                s.next_history(env),
                joint_leaves(settings.k, len(agents), settings.max_joint, rng),
            )
            for p in active
            for s in p.beam
        ]
        per_task = _turn(gen, env, expansions, sampling, judge, settings.judge_weight)
        for p in active:
            _keep(p, per_task[id(p)], settings.width, turn, len(p.beam))
            reached = settings.success is not None and p.top_total >= settings.success
            p.done = reached or turn == settings.turns
    return [p.result() for p in progress]


def best_of(
    gen: Generator,
    env: Env,
    tasks: Sequence[Any],
    budgets: Sequence[int],
    sampling: SamplingSpec,
    seed: int,
    judge: JointJudge | None = None,
    judge_weight: float = 0.0,
) -> list[Search]:
    """`budgets[i]` independent joint samples for task i, drawn as the team protocol draws them
    (aligned i-th samples; a sequential env in role order), all scored in one call, the best kept
    (by the beam's value: give it the beam's judge and weight). `seed` is accepted for symmetry
    with `BeamSettings`: nothing here draws (ties: earliest)."""
    del seed
    _check_judge(judge, judge_weight)
    if len(budgets) != len(tasks) or any(b < 1 for b in budgets):
        raise ValueError(f"best_of: need one budget >= 1 per task, got {list(budgets)}")
    agents = env.roles.agents
    progress = [_Progress(t, []) for t in tasks]
    expansions = [
        _Expansion(p, {a: () for a in agents}, [(i,) * len(agents) for i in range(m)])
        for p, m in zip(progress, budgets, strict=True)
    ]
    per_task = _turn(gen, env, expansions, sampling, judge, judge_weight)
    for p in progress:
        _keep(p, per_task[id(p)], 1, 1, 1)
    return [p.result() for p in progress]


def search_rows(method: str, searches: Sequence[Search], sample: int) -> list[dict[str, Any]]:
    """One row per search, shaped as `eval/protocols.score_rows` builds them (metrics read these):
    the return is the grounded outcome's; a judged search also records the judge's score and the
    value it was ranked by under `search`."""
    return [
        {
            "method": method,
            "problem_id": s.task.id,
            "sample": sample,
            "code": s.actions,
            "seconds": s.seconds,
            "new_tokens": s.new_tokens,
            **s.outcome.record,
            "search": _search_record(s),
        }
        for s in searches
    ]


def _search_record(s: Search) -> dict[str, Any]:
    record: dict[str, Any] = {
        "turns": s.turns,
        "candidates": s.candidates,
        "completions": s.completions,
        "trace": s.trace,
    }
    if s.value is not None:
        record |= {"judge": s.judge, "value": s.value}
    return record
