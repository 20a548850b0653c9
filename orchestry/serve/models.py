"""The served model names and how a group of requests for them becomes one generate call.

- each agent (`aux`, `main`, ...): the base model with that agent's adapter, plain chat;
- the team (`team` by default): the user's message is a code task (`envs/code/user_task.py`); the
  team answers it through the joint turn (`joint/turn.answer_turn`, the protocol the team was trained
  and evaluated with) and the answer is the joined program, helpers first, then main.

`Served.answer` gets requests that may share one call (`Job.batch_key`: same kind and sampling, and
a seeded request alone) and returns one reply per request, in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from orchestry.agents.base import Generator, GenRequest, SamplingSpec
from orchestry.envs.base import Env
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import joint_program
from orchestry.envs.code.user_task import task_from_message
from orchestry.joint.turn import Ask, aligned, answer_turn


class UnknownModel(LookupError):
    """The request names a model this server does not serve."""


@dataclass(frozen=True)
class Reply:
    """What one request gets back."""

    text: str
    finish_reason: str
    """"length" when a completion used all of max_tokens, else "stop"."""
    prompt_tokens: int
    completion_tokens: int
    actions: dict[str, str] | None = None
    """The team's answer: each agent's code (None for an agent model)."""


@dataclass
class Job:
    """One accepted request, waiting for its reply on `future`."""

    model: str
    messages: list[dict[str, str]]
    sampling: SamplingSpec
    seed: int | None
    task: Problem | None
    """The team's task (None: an agent model)."""
    future: Future[Reply] = field(default_factory=Future)

    def batch_key(self) -> tuple[Any, ...]:
        """Jobs with equal keys share a generate call: one kind, one sampling; a seeded job is
        alone (its own key), so its answer depends on its seed, not on its neighbours."""
        seed = ("seed", id(self)) if self.seed is not None else None
        return (self.task is not None, self.sampling, seed)


class Served:
    """The team and its agents over one Generator (the LoRA team with the trained adapters)."""

    def __init__(
        self,
        gen: Generator,
        agents: Sequence[str],
        env: Env | None,
        team_name: str | None,
        reseed: Callable[[int], None] | None = None,
    ) -> None:
        """`env`: the code environment the team answers in (None: no team model). `reseed(seed)`
        makes the generator's next call sample from `seed` (None: seeds are refused)."""
        if team_name is not None and (env is None or team_name in agents):
            raise ValueError(f"team model {team_name!r} needs a code env and a name no agent has")
        self.gen, self.agents, self.env, self.reseed = gen, tuple(agents), env, reseed
        self.team_name = team_name if env is not None else None

    @property
    def names(self) -> list[str]:
        return [*([self.team_name] if self.team_name else []), *self.agents]

    def job(
        self, model: str, messages: list[dict[str, str]], sampling: SamplingSpec, seed: int | None
    ) -> Job:
        """A request as a job; raises UnknownModel, or ValueError naming what is wrong (a team
        message without a function to write; a seed this generator cannot take)."""
        if model not in self.names:
            raise UnknownModel(f"model {model!r} is not served here; models: {self.names}")
        if seed is not None and self.reseed is None:
            raise ValueError("seed: this server's generator cannot be seeded per request")
        task = None
        if model == self.team_name:
            assert self.env is not None
            users = [m["content"] for m in messages if m["role"] == "user"]
            if not users:
                raise ValueError("messages: the team model needs a user message (the task)")
            task = task_from_message(users[-1], len(self.env.roles.helpers))
        return Job(model, messages, sampling, seed, task)

    def answer(self, jobs: Sequence[Job]) -> list[Reply]:
        """Replies to jobs of one batch key, in one generate call (one per agent in a sequential env)."""
        first = jobs[0]
        if first.seed is not None:
            assert self.reseed is not None and len(jobs) == 1
            self.reseed(first.seed)
        if first.task is not None:
            return self._team(jobs, first.sampling)
        requests = [GenRequest(j.model, j.messages, 1) for j in jobs]
        gens = self.gen.generate(requests, first.sampling)
        limit = first.sampling.max_new_tokens
        return [
            Reply(
                g.texts[0],
                _finish(len(g.token_ids[0]), limit),
                len(g.prompt_ids),
                len(g.token_ids[0]),
            )
            for g in gens
        ]

    def _team(self, jobs: Sequence[Job], sampling: SamplingSpec) -> list[Reply]:
        env = self.env
        assert env is not None
        agents = env.roles.agents
        leaf = aligned(1, len(agents))[0]
        asks = [Ask(j.task, {a: () for a in agents}, [leaf]) for j in jobs]
        turn = answer_turn(self.gen, env, asks, sampling)
        replies = []
        for joint in turn.joint:
            answers = joint[leaf]
            actions = {a: answers[a].action for a in agents}
            program = joint_program(
                [actions[a] for a in env.roles.helpers], actions[env.roles.main]
            )
            used = [len(x.generation.token_ids[x.k]) for x in answers.values()]
            prompts = sum(len(x.generation.prompt_ids) for x in answers.values())
            finish = "length" if any(n >= sampling.max_new_tokens for n in used) else "stop"
            replies.append(Reply(program, finish, prompts, sum(used), actions))
        return replies


def _finish(tokens: int, limit: int) -> str:
    return "length" if tokens >= limit else "stop"
