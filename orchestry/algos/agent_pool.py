"""A pool of agents an orchestrator calls one at a time: the environment's roles and a tester.

Every member is real: a role is one LLM call on the shared base with the role's prompt (and the
agent's adapter), the tester runs the team's current joint action through the environment's own
scoring (the code task: the tests in the sandbox) and reports the result in words.

What a call sees, rebuilt from the episode's transcript (the environment keeps no state):
- a role sees its own earlier answers that a tester ran, each with the tester's report (an answer
  no tester ran is redrawn by the role's next call);
- in a sequential environment a role also sees the latest actions of the roles before it (role
  order); otherwise the main agent sees the helpers' latest actions (the sequential pipeline's view).
  A role that has not acted yet is shown nothing, and counts as an empty answer in the joint action.
So the paper's team (every role on its own prompt) is the order main, then the helpers; the sequential
pipeline is the helpers, then main.

The cost of a call is the tokens it generated; a tester call costs `tool_cost` (its report is read
by the agents after it). Tokens, not seconds: the same params give the same costs on any machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestry.agents.base import Generator, GenRequest, SamplingSpec
from orchestry.envs.base import Env, Messages, Outcome, Turn, acts_in_order, with_history
from orchestry.joint.turn import observation

TESTER = "tester"


@dataclass(frozen=True)
class Entry:
    """One call of an episode: who was called and what came back."""

    member: str
    """A role's name, or `tester`."""
    text: str
    """The role's completion, or the tester's report."""
    action: str
    """The role's action (env.act of the text); the tester: ''."""
    cost: float
    """Tokens generated (a role), or the tool cost (the tester)."""
    outcome: Outcome | None = None
    """The tester's verdict on the joint action it ran."""


Transcript = tuple[Entry, ...]


class AgentPool:
    """The members an orchestrator picks from, over any Env and Generator."""

    def __init__(
        self,
        env: Env,
        gen: Generator,
        sampling: SamplingSpec,
        members: Sequence[str],
        tool_cost: float,
    ) -> None:
        roles = env.roles.agents
        unknown = [m for m in members if m not in (*roles, TESTER)]
        if unknown or not members or len(set(members)) != len(members):
            raise ValueError(
                f"pool members {list(members)}: each once, from the roles {list(roles)} and "
                f"{TESTER!r}"
            )
        if not set(roles) <= set(members):
            raise ValueError(f"the pool must hold every role of the task: {list(roles)}")
        self.env, self.gen, self.sampling = env, gen, sampling
        self.members = tuple(members)
        self.tool_cost = tool_cost

    # ------------------------------------------------------------------ what a call sees

    def latest(self, transcript: Transcript) -> dict[str, str]:
        """Each role's latest action, for the roles that have acted."""
        return {e.member: e.action for e in transcript if e.member != TESTER}

    def joint_action(self, task: Any, transcript: Transcript) -> dict[str, str]:
        """The team's current joint action: a role that has not acted answers ''."""
        latest = self.latest(transcript)
        return {a: latest.get(a, self.env.act(task, a, "")) for a in self.env.roles.agents}

    def history(self, agent: str, transcript: Transcript) -> list[Turn]:
        """The agent's earlier answers that a tester reported on, each with that report. An answer
        no tester ran before the agent's next call is left out: the next call redraws it."""
        turns = []
        for i, e in enumerate(transcript):
            if e.member != agent:
                continue
            for later in transcript[i + 1 :]:
                if later.member == agent:
                    break
                if later.member == TESTER and later.outcome is not None:
                    turns.append(Turn(e.text, self.env.feedback(later.outcome, agent)))
                    break
        return turns

    def observation(self, task: Any, agent: str, transcript: Transcript) -> Messages:
        env, roles = self.env, self.env.roles.agents
        latest = self.latest(transcript)
        history = self.history(agent, transcript)
        if acts_in_order(env):
            earlier = {b: latest[b] for b in roles[: roles.index(agent)] if b in latest}
            return observation(env, task, agent, earlier, history)
        if agent == env.roles.main:
            helpers = {h: latest[h] for h in env.roles.helpers if h in latest}
            if helpers:
                shown = env.observe_after_helpers(task, helpers)  # type: ignore[attr-defined]
                return with_history(shown, history)
        return env.observe(task, agent, history)

    # ------------------------------------------------------------------ calls

    def call(self, calls: Sequence[tuple[Any, str, Transcript]]) -> list[Entry]:
        """One batch of calls (task, member, transcript so far): every role's call in one
        generate call, every tester's joint action in one scoring batch."""
        out: list[Entry | None] = [None] * len(calls)
        asks = [i for i, (_, m, _) in enumerate(calls) if m != TESTER]
        tests = [i for i, (_, m, _) in enumerate(calls) if m == TESTER]
        if asks:
            requests = [GenRequest(calls[i][1], self.observation(*calls[i]), 1) for i in asks]
            for i, g in zip(asks, self.gen.generate(requests, self.sampling), strict=True):
                task, agent, _ = calls[i]
                tokens = len(g.token_ids[0]) if g.token_ids else g.new_tokens
                out[i] = Entry(agent, g.texts[0], self.env.act(task, agent, g.texts[0]), tokens)
        if tests:
            batch = [(calls[i][0], self.joint_action(calls[i][0], calls[i][2])) for i in tests]
            for i, o in zip(tests, self.env.score(batch), strict=True):
                report = f"reward {o.total:.2f}. {o.notes}".strip()
                out[i] = Entry(TESTER, report, "", self.tool_cost, o)
        done = [e for e in out if e is not None]
        if len(done) != len(calls):  # every call is a role's or the tester's
            raise RuntimeError(f"the pool answered {len(done)} of {len(calls)} calls")
        return done

    def score(self, finals: Sequence[tuple[Any, Transcript]]) -> list[Outcome]:
        """The environment's verdict on each episode's final joint action (a transcript whose
        last call tested exactly that action reuses the tester's verdict)."""
        out: list[Outcome | None] = [None] * len(finals)
        todo = []
        for i, (_, t) in enumerate(finals):
            if t and t[-1].member == TESTER and t[-1].outcome is not None:
                out[i] = t[-1].outcome
            else:
                todo.append(i)
        if todo:
            batch = [(finals[i][0], self.joint_action(*finals[i])) for i in todo]
            for i, o in zip(todo, self.env.score(batch), strict=True):
                out[i] = o
        return [o for o in out if o is not None]

    def run_order(
        self, tasks: Sequence[Any], order: Sequence[Sequence[str]]
    ) -> list[tuple[Transcript, Outcome]]:
        """A fixed order on every task: each step's members act at once on the transcript
        before the step, in the step's order; the final joint action is scored."""
        transcripts: list[Transcript] = [() for _ in tasks]
        for step in order:
            calls = [(task, m, transcripts[ti]) for ti, task in enumerate(tasks) for m in step]
            entries = iter(self.call(calls))
            transcripts = [t + tuple(next(entries) for _ in step) for t in transcripts]
        outcomes = self.score(list(zip(tasks, transcripts, strict=True)))
        return list(zip(transcripts, outcomes, strict=True))

    # ------------------------------------------------------------------ what the orchestrator reads

    def state_text(self, task: Any, transcript: Transcript, chars: int) -> str:
        """The task as the main agent is asked it, then each call: who, and the start of what it
        wrote (`chars` characters each)."""
        ask = self.env.observe(task, self.env.roles.main)[-1]["content"]
        lines = [f"Task: {ask[: 4 * chars]}"]
        lines += [f"[{e.member}] {e.text[:chars]}" for e in transcript]
        return "\n".join(lines)

    def features(self, transcript: Transcript, max_steps: int) -> list[float]:
        """Counts the embedding blurs: calls per member and in all (over max_steps), the last
        tester's reward (0 before any), and whether the current joint action was tested."""
        counts = [sum(e.member == m for e in transcript) / max_steps for m in self.members]
        tested = [e for e in transcript if e.member == TESTER and e.outcome is not None]
        last = tested[-1].outcome.total if tested else 0.0  # type: ignore[union-attr]
        fresh = float(bool(transcript) and transcript[-1].member == TESTER)
        return [*counts, len(transcript) / max_steps, last, fresh]


def fixed_orders(roles: Sequence[str], members: Sequence[str], max_steps: int) -> dict[str, list]:
    """The fixed orders the learned one is compared with (each a list of steps):
    `team` every role at once on its own prompt (the paper's team), `sequential` the roles in role
    order (each seeing the earlier ones), `round_robin` the pool's members in turn until max_steps
    calls."""
    return {
        "team": [list(roles)],
        "sequential": [[r] for r in roles],
        "round_robin": [[members[i % len(members)]] for i in range(max_steps)],
    }


def transitions(sequences: Sequence[Sequence[str]], members: Sequence[str]) -> dict[str, Any]:
    """Counts of who follows whom: rows `start` and the members, columns the members and `stop`."""
    rows, cols = ["start", *members], [*members, "stop"]
    counts = {r: dict.fromkeys(cols, 0) for r in rows}
    for seq in sequences:
        for a, b in zip(["start", *seq], [*seq, "stop"], strict=True):
            counts[a][b] += 1
    return {"rows": rows, "cols": cols, "counts": [[counts[r][c] for c in cols] for r in rows]}


def as_record(transcript: Transcript) -> list[Mapping[str, Any]]:
    """A transcript as JSON: member, cost, text (and the tester's reward)."""
    return [
        {
            "member": e.member,
            "cost": e.cost,
            "text": e.text,
            **({"reward": e.outcome.total} if e.outcome is not None else {}),
        }
        for e in transcript
    ]
