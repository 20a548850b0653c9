"""Prompt-as-policy learning (GEPA): the agents' system prompts are what learns.

For a team whose weights cannot change (API models), the learnable state is a short list of
instructions per agent, appended to its system message (`Prompted`). The search is GEPA's engine
(PyPI `gepa`, Agrawal et al. 2025) behind our contracts (`prompt_gepa`); each round of `learn`:

1. a parent is picked among the accepted candidates, scored per task on a fixed Pareto set of
   train tasks (GEPA's validation set): the best mean, or with probability `explore` a member of
   GEPA's per-task Pareto front;
2. the parent team runs `samples` joint samples on a minibatch of train tasks (GEPA's epoch-
   shuffled sampler; `run_episodes`);
3. a reflector LLM reads the batch's best and worst episodes with their reward parts and the
   environment's notes (`prompt_reflect.reflection_messages`) and proposes one new instruction per
   agent (`prompt_reflect.parse_rules`);
4. the child (parent's rules + the new ones, at most `max_rules` each, oldest dropped) runs on the
   same minibatch; GEPA accepts it iff its total beats the parent's, then scores it on the Pareto
   set and keeps it. The accepted instructions form the behaviour library.

`save` writes the best candidate's rules with the whole search (prompts.json) and the library
(library.json); `load_rules` reads the rules back for evaluation.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gepa
from gepa.utils.stop_condition import MaxCandidateProposalsStopper

from orchestry import io
from orchestry.agents.base import Generation, Generator, GenRequest, SamplingSpec
from orchestry.algos.prompt_gepa import (
    ExploreFront,
    RoundLog,
    TeamAdapter,
    decode,
)
from orchestry.envs.base import Env, Outcome
from orchestry.joint.turn import Ask, aligned, answer_turn

log = logging.getLogger("orchestry.algos.prompt_policy")

Rules = dict[str, list[str]]
"""Agent -> the instructions it has learned, oldest first."""

RULES_HEADER = "Lessons learned:"
"""The line above the numbered instructions in an agent's system message."""


@dataclass(frozen=True)
class PromptPolicySettings:
    rounds: int
    """Reflection rounds."""
    minibatch: int
    """Train tasks drawn per round (parent and child run on the same ones)."""
    samples: int
    """Joint samples per task in an episode batch."""
    pareto_tasks: int
    """Train tasks (fixed: the first of a seeded shuffle) every accepted candidate is scored on."""
    explore: float
    """Probability of taking a random Pareto-front member as the parent instead of the best mean."""
    max_rules: int
    """Most instructions kept per agent (the oldest are dropped)."""
    seed: int
    """Seeds the task shuffle, the minibatches and the parent choice."""

    def __post_init__(self) -> None:
        if self.rounds < 0 or min(self.minibatch, self.samples, self.max_rules) < 1:
            raise ValueError(f"need rounds >= 0 and minibatch, samples, max_rules >= 1: {self}")
        if self.pareto_tasks < 1 or not 0.0 <= self.explore <= 1.0:
            raise ValueError(f"need pareto_tasks >= 1 and 0 <= explore <= 1: {self}")


def rules_block(rules: Sequence[str]) -> str:
    """The text appended to an agent's system message: the header and a numbered list."""
    return RULES_HEADER + "\n" + "\n".join(f"{i + 1}. {r}" for i, r in enumerate(rules))


class Prompted:
    """A `Generator` that adds each agent's learned instructions to its system message.

    A request of an agent with rules gets them appended to its first system message under
    `RULES_HEADER` (a system message is inserted first when there is none); requests of agents
    without rules are passed on as they are.
    """

    def __init__(self, gen: Generator, rules: Mapping[str, Sequence[str]]) -> None:
        self.gen = gen
        self.rules = {a: list(r) for a, r in rules.items() if r}

    def request(self, request: GenRequest) -> GenRequest:
        """`request` with its agent's rules in the system message (itself when there are none)."""
        rules = self.rules.get(request.agent)
        if not rules:
            return request
        block = rules_block(rules)
        messages = [dict(m) for m in request.messages]
        if messages and messages[0].get("role") == "system":
            base = messages[0]["content"].rstrip()
            messages[0]["content"] = f"{base}\n\n{block}" if base else block
        else:
            messages.insert(0, {"role": "system", "content": block})
        return GenRequest(request.agent, messages, request.n)

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingSpec) -> list[Generation]:
        return self.gen.generate([self.request(r) for r in requests], sampling)


@dataclass
class Episode:
    """One joint sample: every agent's completion and action, and the environment's verdict."""

    task: Any
    texts: dict[str, str]
    """Each agent's raw completion."""
    actions: dict[str, str]
    """What `env.act` made of each completion."""
    outcome: Outcome
    new_tokens: int
    """Tokens the team generated for this joint sample."""


def _sample_tokens(gen: Generation) -> list[int]:
    """New tokens per completion of one request; an API total is split evenly, summing exactly."""
    n = len(gen.texts)
    if len(gen.token_ids) == n and any(gen.token_ids):
        return [len(ids) for ids in gen.token_ids]
    share, extra = divmod(gen.new_tokens, max(1, n))
    return [share + (i < extra) for i in range(n)]


def run_episodes(
    gen: Generator, env: Env, tasks: Sequence[Any], n: int, sampling: SamplingSpec
) -> list[Episode]:
    """`n` joint samples per task (task-major), scored in one `env.score` call.

    The agents answer their own observations in one generate call (the i-th samples form joint
    sample i); in a sequential environment they answer in role order, one call per agent, each
    seeing the earlier agents' actions of its joint sample (`joint.turn.answer_turn`).
    """
    agents = env.roles.agents
    leaves = aligned(n, len(agents))
    turn = answer_turn(gen, env, [Ask(t, {a: () for a in agents}, leaves) for t in tasks], sampling)
    samples = [[joint[leaf] for leaf in leaves] for joint in turn.joint]
    texts = [[{a: x.text for a, x in s.items()} for s in per] for per in samples]
    acts = [[{a: x.action for a, x in s.items()} for s in per] for per in samples]
    tokens = [
        [sum(_sample_tokens(x.generation)[x.k] for x in s.values()) for s in per] for per in samples
    ]
    joint = [(t, acts[ti][i]) for ti, t in enumerate(tasks) for i in range(n)]
    outcomes = env.score(joint)
    if len(outcomes) != len(joint):
        raise RuntimeError(f"env.score returned {len(outcomes)} outcomes for {len(joint)} actions")
    return [
        Episode(t, texts[ti][i], acts[ti][i], outcomes[ti * n + i], tokens[ti][i])
        for ti, t in enumerate(tasks)
        for i in range(n)
    ]


def mean_total(episodes: Sequence[Episode]) -> float:
    return sum(e.outcome.total for e in episodes) / len(episodes)


@dataclass
class Candidate:
    """A set of rules that was accepted (candidate 0: none), scored on the Pareto set."""

    id: int
    parent: int | None
    round: int
    """The round that made it (0 for the start)."""
    rules: Rules
    scores: dict[str, float]
    """Task id -> mean total of its samples on that Pareto task."""

    @property
    def mean(self) -> float:
        """Mean score over the Pareto tasks (0.0 before any is scored)."""
        return sum(self.scores.values()) / len(self.scores) if self.scores else 0.0


@dataclass
class PolicyState:
    """The search so far: every accepted candidate, the best one, the library and the round log."""

    candidates: list[Candidate] = field(default_factory=list)
    best: int = 0
    """Id of the candidate with the highest mean on the Pareto set."""
    library: list[dict[str, Any]] = field(default_factory=list)
    """One row per accepted instruction: agent, text, round, candidate, parent_mean, child_mean
    (the means on the round's minibatch)."""
    rounds: list[dict[str, Any]] = field(default_factory=list)
    """One row per round: round, parent, minibatch, parent_mean, child_mean, accepted,
    proposals (the reflector's raw text), parsed (the instructions read from it)."""
    team_tokens: int = 0
    reflector_tokens: int = 0

    def candidate(self, cid: int) -> Candidate:
        for c in self.candidates:
            if c.id == cid:
                return c
        raise KeyError(f"no candidate {cid}")

    def rules(self) -> Rules:
        """The best candidate's rules."""
        return {a: list(r) for a, r in self.candidate(self.best).rules.items()}


def _task_ids(tasks: Sequence[Any]) -> list[str]:
    """Each task's `id` (its index when it has none); ids must be distinct."""
    ids = [str(getattr(t, "id", i)) for i, t in enumerate(tasks)]
    if len(set(ids)) != len(ids):
        raise ValueError("prompt policy tasks need distinct ids")
    return ids


def _best_of(cands: Sequence[Candidate]) -> Candidate:
    """The highest mean; the earliest on a tie."""
    return max(cands, key=lambda c: (c.mean, -c.id))


def learn(
    team: Generator,
    reflector: Generator,
    env: Env,
    tasks: Sequence[Any],
    settings: PromptPolicySettings,
    sampling: SamplingSpec,
    reflect_sampling: SamplingSpec,
    progress: Callable[[int, int], None] | None = None,
) -> PolicyState:
    """Search the agents' instructions for `settings.rounds` rounds with GEPA's engine (module
    doc); `progress(done, total)` is called after each round."""
    if not tasks:
        raise ValueError("learn needs at least one task")
    agents = env.roles.agents
    ids = _task_ids(tasks)
    rng = random.Random(settings.seed)
    order = list(range(len(tasks)))
    rng.shuffle(order)
    pareto = order[: settings.pareto_tasks]
    selector = ExploreFront(settings.explore, rng)
    log_ = RoundLog(ids, settings.rounds, selector, progress)

    def run(rules: Rules, batch: Sequence[Any]) -> list[Episode]:
        return run_episodes(Prompted(team, rules), env, batch, settings.samples, sampling)

    adapter = TeamAdapter(
        run, settings.samples, reflector, env, settings.max_rules, reflect_sampling, log_
    )
    result = gepa.optimize(
        seed_candidate={a: "" for a in agents},
        trainset=list(tasks),
        valset=[tasks[i] for i in pareto],
        adapter=adapter,
        candidate_selection_strategy=selector,
        module_selector="all",  # one instruction per agent each round
        reflection_minibatch_size=min(settings.minibatch, len(tasks)),
        skip_perfect_score=False,
        stop_callbacks=MaxCandidateProposalsStopper(settings.rounds),
        callbacks=[log_],
        track_best_outputs=False,
        seed=settings.seed,
        logger=_GepaLog(),
    )
    for row in log_.rows:
        log.info(
            "round %d: parent %d (%s), child %s, %s",
            row["round"],
            row["parent"],
            "-" if row["parent_mean"] is None else f"{row['parent_mean']:.3f}",
            "none parsed" if row["child_mean"] is None else f"{row['child_mean']:.3f}",
            "accepted" if row["accepted"] else "rejected",
        )
    state = PolicyState(rounds=log_.rows, team_tokens=log_.team_tokens)
    state.reflector_tokens = log_.reflector_tokens
    for idx, cand in enumerate(result.candidates):
        parent = next((p for p in result.parents[idx] if p is not None), None)
        scores = {ids[pareto[k]]: float(s) for k, s in result.val_subscores[idx].items()}
        state.candidates.append(
            Candidate(idx, parent, log_.made_in.get(idx, 0), decode(cand), scores)
        )
    for row in log_.rows:
        if row["accepted"]:
            child = next(i for i, r in log_.made_in.items() if r == row["round"])
            state.library += [
                {
                    "agent": agent,
                    "text": rule,
                    "round": row["round"],
                    "candidate": child,
                    "parent_mean": row["parent_mean"],
                    "child_mean": row["child_mean"],
                }
                for agent, rule in row["parsed"].items()
            ]
    state.best = _best_of(state.candidates).id
    return state


class _GepaLog:
    """GEPA's logger, into this module's log at debug level."""

    def log(self, message: str) -> None:
        log.debug("gepa: %s", message)


def save(state: PolicyState, prompts_path: Path, library_path: Path) -> None:
    """prompts.json: the best rules, the candidates, the rounds and the token counts;
    library.json: the accepted instructions (`{"behaviours": [...]}`). Both written atomically."""
    prompts = {
        "rules": state.rules(),
        "best": state.best,
        "candidates": [{**asdict(c), "mean": c.mean} for c in state.candidates],
        "rounds": state.rounds,
        "tokens": {"team": state.team_tokens, "reflector": state.reflector_tokens},
    }
    io.write_json(prompts_path, prompts)
    io.write_json(library_path, {"behaviours": state.library})


def load_rules(prompts_path: Path) -> Rules:
    """The learned rules in a prompts.json that `save` wrote."""
    try:
        data = json.loads(Path(prompts_path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{prompts_path} is not JSON ({err}); rerun the prompt learning") from None
    rules = data.get("rules") if isinstance(data, dict) else None
    if not isinstance(rules, dict) or not all(
        isinstance(a, str) and isinstance(r, list) and all(isinstance(x, str) for x in r)
        for a, r in rules.items()
    ):
        raise ValueError(
            f"{prompts_path} holds no learned rules (need {{'rules': {{agent: [text, ...]}}}})"
        )
    return {a: list(r) for a, r in rules.items()}
