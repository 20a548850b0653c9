"""The served model names and how a group of requests for them becomes one generate call.

- each agent (`aux`, `main`, ...): the base model with that agent's adapter, plain chat (with the
  client's tools, `tool_calls.py`) or plain-text continuation (`/v1/completions`, a lone message
  of role TEXT_ROLE);
- the team (`team` by default): the user's message is a code task (`envs/code/user_task.py`); the
  team answers it through the joint turn (`joint/turn.answer_turn`, the protocol the team was trained
  and evaluated with) and the answer is the joined program, helpers first, then main. With the
  env's tools on, the turn runs in steps (`team_tools.py`): its tool calls run outside the batching
  worker, in the box (`tool_box.py`).

`Served.job` checks everything about one request that could fail a generate call (its model, its
seed, its task, that its prompt tokenizes and fits the model's context with max_tokens) before it
joins a batch. `Served.answer` gets requests that may share one call (`Job.batch_key`: same kind and
sampling, and a seeded request alone, sampled from its own seed) and returns one reply per request,
in order (None: a team turn waits for its tools, `Served.run_tools`). A streamed agent request's
tokens reach its `TokenStream` as they are generated (`streaming.py`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from orchestry.agents.base import Generation, Generator, GenRequest, SamplingSpec
from orchestry.envs.base import Env
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import joint_program
from orchestry.envs.code.user_task import task_from_message
from orchestry.envs.tools.protocol import CLOSE
from orchestry.joint.tool_turn import tool_sampling
from orchestry.joint.turn import Ask, aligned, answer_turn, observation, tools_of
from orchestry.serve.errors import clip
from orchestry.serve.streaming import TokenStream, cut_at_stop
from orchestry.serve.team_tools import TeamToolTurn
from orchestry.serve.tool_box import BoxCall
from orchestry.serve.tool_calls import ToolOffer

log = logging.getLogger(__name__)

TEXT_ROLE = "text"
"""A lone message of this role is a plain-text prompt, read without the chat template (the
completions endpoint); the composition root's generator reads it so (`Served(text_prompts=...)`)."""
Seeded = Callable[[int, int], AbstractContextManager[None]]
"""`seeded(seed, calls)`: a context in which the generator samples as a generator seeded with
`seed` samples on its call number `calls`, its own stream untouched."""
Streaming = Callable[[Callable[[list[int]], None]], AbstractContextManager[None]]
"""`streaming(on_step)`: a context in which each decode step of the generator's calls reports
the new token of every row, rows in the order of the call's requests, to `on_step`."""


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
    tool_calls: list[dict[str, Any]] | None = None
    """The client's functions the agent called (OpenAI's `tool_calls`; finish_reason
    "tool_calls"); `text` is then the content before the call."""


@dataclass(eq=False)  # a job is itself: the batcher keeps the ones at their tools in a set
class Job:
    """One accepted request, waiting for its reply on `future`."""

    model: str
    messages: list[dict[str, str]]
    sampling: SamplingSpec
    seed: int | None
    task: Problem | None
    """The team's task (None: an agent model)."""
    future: Future[Reply] = field(default_factory=Future)
    stop: tuple[str, ...] = ()
    """The client's stop strings (`sampling.stop` adds the end of a call when tools are offered)."""
    tools: ToolOffer | None = None
    """The client's functions offered to the agent."""
    stream: TokenStream | None = None
    """Where a streamed agent request's tokens go as they are generated."""
    turn: TeamToolTurn | None = None
    """The team's turn with its tools on, between steps."""
    calls: int = 0
    """Generate calls made for the job so far (a seeded job's next call samples as the seed's)."""

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
        seeded: Seeded | None = None,
        prompt_tokens: Callable[[str, list[dict[str, str]]], int] | None = None,
        context: int | None = None,
        *,
        streaming: Streaming | None = None,
        decode: Callable[[str, list[int]], str] | None = None,
        text_prompts: bool = False,
        min_prompt_tokens: int = 1,
        run_tool: Callable[[BoxCall], str] | None = None,
    ) -> None:
        """`env`: the code environment the team answers in (None: no team model). `seeded`: see
        `Seeded` (None: seeds are refused). `prompt_tokens(agent, messages)`: the length of the
        agent's templated prompt; `context`: the most tokens prompt and completion may hold
        together (None: prompts are not checked). `streaming` (see `Streaming`) with
        `decode(agent, ids)` (the text of an agent's tokens, as its completions are decoded):
        agents' streams get their tokens as they come (None: at the end). `text_prompts`: the
        generator reads a lone TEXT_ROLE message as plain text (else completions are refused);
        every prompt holds at least `min_prompt_tokens` tokens. `run_tool`: runs one of the env's
        tool calls in the box (needed when the env turns its tools on; `tool_box.run_in_box`)."""
        if team_name is not None and (env is None or team_name in agents):
            raise ValueError(f"team model {team_name!r} needs a code env and a name no agent has")
        self.gen, self.agents, self.env, self.seeded = gen, tuple(agents), env, seeded
        self.team_name = team_name if env is not None else None
        self.prompt_tokens, self.context = prompt_tokens, context
        self.streaming, self.decode, self.text_prompts = streaming, decode, text_prompts
        self.min_prompt_tokens = min_prompt_tokens
        self.tool_use = tools_of(env) if env is not None and self.team_name else None
        if self.tool_use is not None and run_tool is None:
            raise ValueError(
                "the env turns its tools on (env.tools.enabled): the team would run them; serve "
                "them only with a tool runner (--server-tools) or turn them off"
            )
        self.run_tool = run_tool if self.tool_use is not None else None

    @property
    def names(self) -> list[str]:
        return [*([self.team_name] if self.team_name else []), *self.agents]

    @property
    def runs_tools(self) -> bool:
        """Whether team turns wait for tool calls (`answer` returns None for them)."""
        return self.run_tool is not None

    def job(
        self,
        model: str,
        messages: list[dict[str, str]],
        sampling: SamplingSpec,
        seed: int | None,
        tools: ToolOffer | None = None,
        emit: Callable[[str], None] | None = None,
    ) -> Job:
        """A request as a job; raises UnknownModel, or ValueError opening with the field at fault
        ("messages: ...": a team message without a function to write, a prompt the tokenizer
        cannot read or over the context; "seed: ...", "stop: ...", "tools: ...", "model: ...").
        `tools`: the client's functions offered; `emit`: stream the agent's text to it as its
        tokens come (the team's comes whole at the end)."""
        if model not in self.names:
            raise UnknownModel(f"model {clip(model)!r} is not served here; models: {self.names}")
        if seed is not None and self.seeded is None:
            raise ValueError("seed: this server's generator cannot be seeded per request")
        text = [m["role"] for m in messages] == [TEXT_ROLE]
        if text and model == self.team_name:
            raise ValueError(
                f"model: {model!r} (the team) answers chat only (POST /v1/chat/completions) with "
                f"a whole program; text completions are for the agents {list(self.agents)}"
            )
        if text and not self.text_prompts:
            raise ValueError("prompt: this server's generator reads chat messages only")
        task = None
        prompts = [(model, messages)]
        if model == self.team_name:
            assert self.env is not None
            if sampling.stop:
                raise ValueError("stop: the team answers with whole programs; stop is for agents")
            if tools is not None:
                raise ValueError(
                    "tools: the team answers with whole programs; the client's tools are for "
                    f"the agents {list(self.agents)}"
                )
            users = [m["content"] for m in messages if m["role"] == "user"]
            if not users:
                raise ValueError("messages: the team model needs a user message (the task)")
            task_message = users[-1]
            task = task_from_message(task_message, len(self.env.roles.helpers))
            # the code env's agents answer at once, each on its own observation of the task
            prompts = [(a, observation(self.env, task, a, {})) for a in self.env.roles.agents]
        self._check_length(prompts, sampling.max_new_tokens)
        stop = sampling.stop
        if tools is not None:
            sampling = replace(sampling, stop=(*stop, CLOSE))
        job = Job(model, messages, sampling, seed, task, stop=stop, tools=tools)
        if task is not None and self.tool_use is not None:
            assert self.env is not None
            job.turn = TeamToolTurn(self.env, self.tool_use, task, task_message)
        if emit is not None and task is None and self.streaming and self.decode:
            named = tools is not None and tools.named is not None
            if not named:  # a named call's text is all arguments: sent whole at the end
                decode = self.decode
                job.stream = TokenStream(
                    lambda ids: decode(model, ids), stop, emit, before_call=tools is not None
                )
        return job

    def _check_length(self, prompts: list[tuple[str, list[dict[str, str]]]], max_new: int) -> None:
        if self.prompt_tokens is None:
            return
        lengths = []
        for agent, messages in prompts:
            try:
                lengths.append(self.prompt_tokens(agent, messages))
            except Exception as err:  # noqa: BLE001  # the tokenizer's errors have no common type
                raise ValueError(
                    f"{_prompt_field(messages)}: the tokenizer cannot read it ({err!r:.120})"
                ) from None
        longest = max(lengths)
        if min(lengths) < self.min_prompt_tokens:
            raise ValueError(
                f"{_prompt_field(prompts[0][1])}: {min(lengths)} token(s); this server's "
                f"generator reads prompts of at least {self.min_prompt_tokens}: write more"
            )
        if self.context is not None and longest + max_new > self.context:
            raise ValueError(
                f"{_prompt_field(prompts[0][1])}: {longest} prompt tokens + max_tokens {max_new} "
                f"= {longest + max_new}, over the model's context of {self.context} tokens; "
                "shorten the prompt or lower max_tokens"
            )

    def answer(self, jobs: Sequence[Job]) -> list[Reply | None]:
        """Replies to jobs of one batch key, in one generate call (one per agent in a sequential
        env); a seeded job (alone) samples from its seed, the server's own stream untouched.
        None: the job's team turn waits for its tool calls (`run_tools`, then `answer` again)."""
        first = jobs[0]
        if first.seed is None:
            return self._answer(jobs)
        assert self.seeded is not None and len(jobs) == 1
        with self.seeded(first.seed, first.calls):
            return self._answer(jobs)

    def run_tools(self, job: Job) -> None:
        """Run the tool calls `job`'s team turn waits for (in the tool pool, never the worker)."""
        assert job.turn is not None and self.run_tool is not None
        job.turn.run_calls(self.run_tool)

    def _answer(self, jobs: Sequence[Job]) -> list[Reply | None]:
        first = jobs[0]
        if first.task is not None and first.turn is not None:
            return self._team_step(jobs, first.sampling)
        if first.task is not None:
            for job in jobs:
                job.calls += 1
            return list(self._team(jobs, first.sampling))
        requests = [GenRequest(j.model, j.messages, 1) for j in jobs]
        with self._streamed(jobs):
            gens = self.gen.generate(requests, first.sampling)
        for job in jobs:
            job.calls += 1
        return [self._reply(j, g) for j, g in zip(jobs, gens, strict=True)]

    def _reply(self, job: Job, g: Generation) -> Reply:
        text, stopped = cut_at_stop(g.texts[0], job.stop)
        tokens = len(g.prompt_ids), len(g.token_ids[0])
        if job.tools is not None:
            content, calls = job.tools.read(text)
            if calls is not None:
                return Reply(content or "", "tool_calls", *tokens, tool_calls=calls)
        finish = "stop" if stopped else _finish(tokens[1], job.sampling.max_new_tokens)
        return Reply(text, finish, *tokens)

    def _streamed(self, jobs: Sequence[Job]) -> AbstractContextManager[None]:
        """The generate call's context: each step's tokens to the jobs' streams, when any."""
        streams = [j.stream for j in jobs]
        if self.streaming is None or not any(streams):
            return contextlib.nullcontext()
        broken: list[Exception] = []

        def on_step(tokens: list[int]) -> None:
            # another number of rows: not one batch of these requests in order (a generator
            # with several base models); they get their text at the end
            if broken or len(tokens) != len(streams):
                return
            try:
                for stream, token in zip(streams, tokens, strict=True):
                    if stream is not None:
                        stream.add(token)
            except Exception as err:  # noqa: BLE001  # a stream must never fail the generation
                log.exception("streaming failed; the rest of the text comes at the end")
                broken.append(err)

        return self.streaming(on_step)

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

    def _team_step(self, jobs: Sequence[Job], sampling: SamplingSpec) -> list[Reply | None]:
        """One generate call for the team turns of `jobs` (each at its own step), tools on."""
        turns = [j.turn for j in jobs if j.turn is not None]
        asked = [t.requests() for t in turns]
        gens = self.gen.generate(
            [r for rs in asked for r in rs], tool_sampling(sampling, self.tool_use)
        )
        replies: list[Reply | None] = []
        at = 0
        for job, turn, requests in zip(jobs, turns, asked, strict=True):
            job.calls += 1
            turn.take(gens[at : at + len(requests)])
            at += len(requests)
            if turn.waiting:
                replies.append(None)
                continue
            program, actions, prompts, used, longest = turn.result()
            finish = "length" if longest >= sampling.max_new_tokens else "stop"
            replies.append(Reply(program, finish, prompts, used, actions))
        return replies


def _prompt_field(messages: list[dict[str, str]]) -> str:
    """The request field a prompt came from: `prompt` (completions) or `messages` (chat)."""
    return "prompt" if [m["role"] for m in messages] == [TEXT_ROLE] else "messages"


def _finish(tokens: int, limit: int) -> str:
    return "length" if tokens >= limit else "stop"
