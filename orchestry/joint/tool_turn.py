"""Tool use within a joint turn (docs/tools.md): call, observe, continue, within the turn's budget.

When the environment turns tools on (`tool_use`, see `envs/tools`), every completion of a turn is a
chain of *segments*. A segment is generated under the stop string `</tool>`; when it ends in a call
(and the agent has calls left), the tool runs and the next segment is asked for with the agent's
own segments and the results as chat messages (assistant: the segment, user: `<result>`), so the
result is part of the next segment's *prompt*, never of a completion. Continuations of every
completion still calling go out together, one generate call per round, up to `max_calls` rounds.

Training math: the agent's probability of its whole turn is the product of its segments'
probabilities given their prompts (tool results are the environment's transitions, not the
agent's tokens), so log pi(turn) = sum_k log pi(segment_k | prompt_k). Each segment is stored with
its own prompt ids and token ids, exactly as generated, and becomes one update row with the
sample's advantage (`algos/magrpo.sample_advantages`): the loss never sees a result token.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestry.agents.base import Generation, Generator, GenRequest, SamplingSpec
from orchestry.envs.base import Env
from orchestry.envs.tools.protocol import CLOSE, final_answer, parse_call, result_message
from orchestry.envs.tools.registry import ToolUse


@dataclass(frozen=True)
class ToolStep:
    """One call an agent made in its turn: the call, its result, and the segment written after."""

    name: str
    argument: str
    result: str
    """The observation the agent was shown (`<result>` tags, cut to the budget)."""
    generation: Generation
    """The continuation's generation (its prompt holds the call's result)."""
    k: int


@dataclass
class ToolChain:
    """One completion's segments so far."""

    messages: list[dict[str, str]]
    """The observation, then each segment (assistant) and its result (user)."""
    texts: list[str]
    steps: list[ToolStep]

    @property
    def final(self) -> str:
        """The answer: the agent's text outside its calls."""
        return final_answer(self.texts)


def tool_sampling(sampling: SamplingSpec, tool_use: ToolUse | None) -> SamplingSpec:
    """The turn's sampling: with tools on, each segment stops at `</tool>`."""
    return sampling if tool_use is None else replace(sampling, stop=(CLOSE,))


def cut_at_close(text: str) -> str:
    """The text up to and including the first `</tool>` (for generators that ignore stop strings)."""
    end = text.find(CLOSE)
    return text if end < 0 else text[: end + len(CLOSE)]


def run_tools(
    gen: Generator,
    env: Env,
    tool_use: ToolUse,
    tasks: Sequence[Any],
    requests: Sequence[GenRequest],
    gens: Sequence[Generation],
    sampling: SamplingSpec,
) -> tuple[
    list[list[ToolChain]], list[tuple[list[int], list[GenRequest], list[Generation], float]]
]:
    """Run the calls of each request's completions (`tasks[r]` is request r's task) until none
    calls or the budget is spent. Returns each request's chains (one per completion) and the
    continuation calls made (request owners, requests, generations, seconds)."""
    chains = [
        [ToolChain(list(r.messages), [cut_at_close(t)], []) for t in g.texts]
        for r, g in zip(requests, gens, strict=True)
    ]
    calls = []
    for _ in range(tool_use.budget.max_calls):
        owners: list[int] = []
        asked: list[GenRequest] = []
        pending: list[tuple[ToolChain, str, str, str]] = []  # chain, tool, argument, result shown
        for r, (request, mine) in enumerate(zip(requests, chains, strict=True)):
            for chain in mine:
                call = parse_call(chain.texts[-1])
                if call is None:
                    continue
                draft = env.act(tasks[r], request.agent, chain.final)
                shown = result_message(
                    call.name,
                    tool_use.call(tasks[r], draft, call),
                    tool_use.budget.max_result_chars,
                )
                chain.messages += [
                    {"role": "assistant", "content": chain.texts[-1]},
                    {"role": "user", "content": shown},
                ]
                owners.append(r)
                asked.append(GenRequest(request.agent, list(chain.messages), 1))
                pending.append((chain, call.name, call.argument, shown))
        if not asked:
            break
        start = time.perf_counter()
        more = gen.generate(asked, sampling)
        seconds = time.perf_counter() - start
        if len(more) != len(asked):
            raise ValueError(f"generate: {len(asked)} continuations gave {len(more)} generations")
        calls.append((owners, asked, more, seconds))
        for (chain, name, argument, shown), g in zip(pending, more, strict=True):
            chain.texts.append(cut_at_close(g.texts[0]))
            chain.steps.append(ToolStep(name, argument, shown, g, 0))
    return chains, calls
