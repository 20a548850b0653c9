"""The team's turn with its own tools on (`env.tools`), as the server runs it: generation in the
batching worker, the tool calls in the tool pool and in the box (`tool_box.py`), never in the
worker, so no client waits while a tool runs.

It is the turn `joint/turn.answer_turn` runs with `joint/tool_turn.run_tools` (docs/tools.md),
cut into steps: every agent answers the task on its observation (the tools' paragraph ends it),
each segment stops at `</tool>`; a segment ending in a call, while the agent has calls left, gets
the call's result as the user's next message and is continued. `requests()` says what to generate
next, `take()` records the generations, `run_calls()` (in the pool) runs the calls they made,
until no call waits; `result()` is the joined program, as `answer_turn` would give it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from orchestry.agents.base import Generation, GenRequest
from orchestry.envs.base import Env
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import joint_program
from orchestry.envs.tools.protocol import ToolCall, parse_call, result_message
from orchestry.envs.tools.registry import ToolUse
from orchestry.joint.tool_turn import ToolChain, ToolStep, cut_at_close
from orchestry.joint.turn import observation
from orchestry.serve.tool_box import BoxCall


@dataclass
class TeamToolTurn:
    """One team request's turn between its steps (module doc)."""

    env: Env
    tool_use: ToolUse
    task: Problem
    task_message: str
    """The user's message the task was read from (the box reads the task from it again)."""
    chains: dict[str, ToolChain] = field(default_factory=dict)
    generations: list[Generation] = field(default_factory=list)
    rounds: int = 0
    """Rounds of tool calls run so far (at most the budget's max_calls)."""
    _pending: dict[str, ToolCall] = field(default_factory=dict)
    _continuing: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(agent, tool, argument, result shown) of each chain whose result waits to be continued."""

    def requests(self) -> list[GenRequest]:
        """What to generate next: each agent's first segment, or the continuations."""
        if not self.chains:
            return [
                GenRequest(a, observation(self.env, self.task, a, {}), 1)
                for a in self.env.roles.agents
            ]
        return [GenRequest(a, list(self.chains[a].messages), 1) for a, *_ in self._continuing]

    def take(self, gens: list[Generation]) -> None:
        """Record the generations of `requests()`, in order; find the calls they make."""
        if not self.chains:
            for request, g in zip(self.requests(), gens, strict=True):
                self.chains[request.agent] = ToolChain(
                    list(request.messages), [cut_at_close(g.texts[0])], []
                )
        else:
            for (agent, tool, argument, shown), g in zip(self._continuing, gens, strict=True):
                chain = self.chains[agent]
                chain.texts.append(cut_at_close(g.texts[0]))
                chain.steps.append(ToolStep(tool, argument, shown, g, 0))
        self.generations += gens
        self._continuing = []
        self._pending = {}
        if self.rounds < self.tool_use.budget.max_calls:
            for agent, chain in self.chains.items():
                call = parse_call(chain.texts[-1])
                if call is not None:
                    self._pending[agent] = call

    @property
    def waiting(self) -> bool:
        """Whether tool calls wait to run (`run_calls`) before the next step."""
        return bool(self._pending)

    def run_calls(self, run: Callable[[BoxCall], str]) -> None:
        """Run the waiting calls with `run` (the box) and queue their continuations."""
        helpers = len(self.env.roles.helpers)
        for agent, call in self._pending.items():
            chain = self.chains[agent]
            draft = self.env.act(self.task, agent, chain.final)
            result = run(BoxCall.of(self.tool_use, self.task_message, helpers, draft, call))
            shown = result_message(call.name, result, self.tool_use.budget.max_result_chars)
            chain.messages += [
                {"role": "assistant", "content": chain.texts[-1]},
                {"role": "user", "content": shown},
            ]
            self._continuing.append((agent, call.name, call.argument, shown))
        self._pending = {}
        self.rounds += 1

    def result(self) -> tuple[str, dict[str, str], int, int, int]:
        """(the joined program, each agent's code, prompt tokens, completion tokens, the most
        tokens one segment used) once no call waits."""
        roles = self.env.roles
        actions = {a: self.env.act(self.task, a, self.chains[a].final) for a in roles.agents}
        program = joint_program([actions[a] for a in roles.helpers], actions[roles.main])
        prompts = sum(len(g.prompt_ids) for g in self.generations)
        used = [len(g.token_ids[0]) for g in self.generations]
        return program, actions, prompts, sum(used), max(used, default=0)
