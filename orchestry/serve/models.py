"""The served model names and how a group of requests for them becomes one generate call.

- each agent (`aux`, `main`, ...): the base model with that agent's adapter, plain chat;
- the team (`team` by default): the user's message is a code task (`envs/code/user_task.py`); the
  team answers it through the joint turn (`joint/turn.answer_turn`, the protocol the team was trained
  and evaluated with) and the answer is the joined program, helpers first, then main.

`Served.job` checks everything about one request that could fail a generate call (its model, its
seed, its task, that its prompt tokenizes and fits the model's context with max_tokens) before it
joins a batch. `Served.answer` gets requests that may share one call (`Job.batch_key`: same kind and
sampling, and a seeded request alone, sampled from its own seed) and returns one reply per request,
in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from orchestry.agents.base import Generator, GenRequest, SamplingSpec
from orchestry.envs.base import Env
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import joint_program
from orchestry.envs.code.user_task import task_from_message
from orchestry.joint.turn import Ask, aligned, answer_turn, observation
from orchestry.serve.errors import clip


class UnknownModel(LookupError):
    """The request names a model this server does not serve."""


@dataclass(frozen=True)
class Reply:
    """What one request gets back."""

    text: str
    finish_reason: str
    """"length" when a completion used all of max_tokens (and met no stop string), else "stop"."""
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
        seeded: Callable[[int], AbstractContextManager[None]] | None = None,
        prompt_tokens: Callable[[str, list[dict[str, str]]], int] | None = None,
        context: int | None = None,
    ) -> None:
        """`env`: the code environment the team answers in (None: no team model). `seeded(seed)`:
        a context in which the generator samples from `seed` alone, its own stream untouched
        (None: seeds are refused). `prompt_tokens(agent, messages)`: the length of the agent's
        templated prompt; `context`: the most tokens prompt and completion may hold together
        (None: prompts are not checked)."""
        if team_name is not None and (env is None or team_name in agents):
            raise ValueError(f"team model {team_name!r} needs a code env and a name no agent has")
        self.gen, self.agents, self.env, self.seeded = gen, tuple(agents), env, seeded
        self.team_name = team_name if env is not None else None
        self.prompt_tokens, self.context = prompt_tokens, context

    @property
    def names(self) -> list[str]:
        return [*([self.team_name] if self.team_name else []), *self.agents]

    def job(
        self, model: str, messages: list[dict[str, str]], sampling: SamplingSpec, seed: int | None
    ) -> Job:
        """A request as a job; raises UnknownModel, or ValueError opening with the field at fault
        ("messages: ...": a team message without a function to write, a prompt the tokenizer
        cannot read or over the context; "seed: ...", "stop: ...")."""
        if model not in self.names:
            raise UnknownModel(f"model {clip(model)!r} is not served here; models: {self.names}")
        if seed is not None and self.seeded is None:
            raise ValueError("seed: this server's generator cannot be seeded per request")
        task = None
        prompts = [(model, messages)]
        if model == self.team_name:
            assert self.env is not None
            if sampling.stop:
                raise ValueError("stop: the team answers with whole programs; stop is for agents")
            users = [m["content"] for m in messages if m["role"] == "user"]
            if not users:
                raise ValueError("messages: the team model needs a user message (the task)")
            task = task_from_message(users[-1], len(self.env.roles.helpers))
            # the code env's agents answer at once, each on its own observation of the task
            prompts = [(a, observation(self.env, task, a, {})) for a in self.env.roles.agents]
        self._check_length(prompts, sampling.max_new_tokens)
        return Job(model, messages, sampling, seed, task)

    def _check_length(self, prompts: list[tuple[str, list[dict[str, str]]]], max_new: int) -> None:
        if self.prompt_tokens is None:
            return
        longest = 0
        for agent, messages in prompts:
            try:
                longest = max(longest, self.prompt_tokens(agent, messages))
            except Exception as err:  # noqa: BLE001  # the tokenizer's errors have no common type
                raise ValueError(
                    f"messages: the tokenizer cannot read them ({err!r:.120})"
                ) from None
        if self.context is not None and longest + max_new > self.context:
            raise ValueError(
                f"messages: {longest} prompt tokens + max_tokens {max_new} = {longest + max_new}, "
                f"over the model's context of {self.context} tokens; shorten the messages or "
                "lower max_tokens"
            )

    def answer(self, jobs: Sequence[Job]) -> list[Reply]:
        """Replies to jobs of one batch key, in one generate call (one per agent in a sequential
        env); a seeded job (alone) samples from its seed, the server's own stream untouched."""
        first = jobs[0]
        if first.seed is None:
            return self._answer(jobs)
        assert self.seeded is not None and len(jobs) == 1
        with self.seeded(first.seed):
            return self._answer(jobs)

    def _answer(self, jobs: Sequence[Job]) -> list[Reply]:
        first = jobs[0]
        if first.task is not None:
            return self._team(jobs, first.sampling)
        requests = [GenRequest(j.model, j.messages, 1) for j in jobs]
        gens = self.gen.generate(requests, first.sampling)
        limit, stop = first.sampling.max_new_tokens, first.sampling.stop
        replies = []
        for g in gens:
            text, stopped = _cut(g.texts[0], stop)
            finish = "stop" if stopped else _finish(len(g.token_ids[0]), limit)
            replies.append(Reply(text, finish, len(g.prompt_ids), len(g.token_ids[0])))
        return replies

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


def _cut(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to its first stop string (OpenAI leaves the stop string out), and whether one
    was met (the generation cut its tokens at the token completing it)."""
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(found)], True) if found else (text, False)
