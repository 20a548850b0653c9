"""One joint turn (orchestry/joint/turn.py): who is asked what, in which order, and the actions.

A tiny environment (the action is the completion in upper case; a sequential variant shows the
earlier agents' actions) and a generator that answers from a counter and keeps every call.
"""

from dataclasses import dataclass

import pytest

from orchestry.agents.base import Generation, SamplingSpec
from orchestry.envs.base import Outcome, Roles, Turn, with_history
from orchestry.joint.turn import Ask, aligned, answer_turn, observation

SAMPLING = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8)


@dataclass(frozen=True)
class Task:
    id: str


class UpperEnv:
    roles = Roles(("aux",), "main")
    sequential = False

    def observe(self, task, agent, history=()):
        return with_history([{"role": "user", "content": f"{task.id} for {agent}"}], history)

    def act(self, task, agent, text):
        return text.upper()

    def score(self, batch):
        return [Outcome(0.0, {}, {}) for _ in batch]

    def feedback(self, outcome, agent, advice=None):
        return "again"

    def reference(self, task, agent):
        return None


class InOrderUpperEnv(UpperEnv):
    sequential = True

    def observe_after(self, task, agent, earlier, history=()):
        shown = "; ".join(f"{b} did {a}" for b, a in earlier.items())
        return with_history(
            [{"role": "user", "content": f"{task.id} for {agent}: {shown}"}], history
        )


class Counting:
    """Answers `<agent><running number>` and keeps each call's (agent, last message, n)."""

    def __init__(self) -> None:
        self.count, self.calls = 0, []

    def generate(self, requests, sampling):
        self.calls.append([(r.agent, r.messages[-1]["content"], r.n) for r in requests])
        out = []
        for r in requests:
            texts = []
            for _ in range(r.n):
                self.count += 1
                texts.append(f"{r.agent}{self.count}")
            out.append(Generation(r.agent, texts, [[1]] * r.n, [9], 0.0, r.n))
        return out


TASKS = [Task("t0"), Task("t1")]


def fresh(agents=("aux", "main")) -> dict:
    return {a: () for a in agents}


def test_agents_at_once_answer_in_one_call_task_major():
    gen = Counting()
    turn = answer_turn(gen, UpperEnv(), [Ask(t, fresh(), aligned(2, 2)) for t in TASKS], SAMPLING)
    assert gen.calls == [
        [("aux", "t0 for aux", 2), ("main", "t0 for main", 2)]
        + [("aux", "t1 for aux", 2), ("main", "t1 for main", 2)]
    ]
    first = turn.joint[0]
    assert list(first) == [(0, 0), (1, 1)]
    assert {a: x.action for a, x in first[(1, 1)].items()} == {"aux": "AUX2", "main": "MAIN4"}
    assert [x.text for x in turn.answers[1]["main"]] == ["main7", "main8"]
    assert (turn.new_tokens, len(turn.calls), turn.calls[0].asks) == (8, 1, [0, 0, 1, 1])


def test_a_sequential_env_asks_in_role_order_each_sample_seeing_its_partner():
    gen = Counting()
    asks = [Ask(t, fresh(), aligned(2, 2)) for t in TASKS]
    turn = answer_turn(gen, InOrderUpperEnv(), asks, SAMPLING)
    assert gen.calls == [
        [("aux", "t0 for aux", 2), ("aux", "t1 for aux", 2)],
        [
            ("main", "t0 for main: aux did AUX1", 1),
            ("main", "t0 for main: aux did AUX2", 1),
            ("main", "t1 for main: aux did AUX3", 1),
            ("main", "t1 for main: aux did AUX4", 1),
        ],
    ]
    joint = turn.joint[1][(1, 1)]
    assert (joint["aux"].text, joint["main"].text, joint["main"].k) == ("aux4", "main8", 0)


def test_other_leaves_ask_only_for_the_samples_they_use_and_share_them():
    gen = Counting()
    leaves = [(0, 0), (0, 2), (1, 2)]
    turn = answer_turn(gen, UpperEnv(), [Ask(TASKS[0], fresh(), leaves)], SAMPLING)
    assert gen.calls == [[("aux", "t0 for aux", 2), ("main", "t0 for main", 2)]]
    joint = turn.joint[0]
    assert [x.index for x in turn.answers[0]["main"]] == [0, 2]
    assert joint[(0, 2)]["main"] is joint[(1, 2)]["main"] and joint[(0, 2)]["aux"].text == "aux1"

    in_order = Counting()
    answer_turn(in_order, InOrderUpperEnv(), [Ask(TASKS[0], fresh(), leaves)], SAMPLING)
    # main is asked once per choice of aux's sample, for just the samples those leaves use
    assert in_order.calls[1] == [
        ("main", "t0 for main: aux did AUX1", 2),
        ("main", "t0 for main: aux did AUX2", 1),
    ]


def test_histories_open_each_agents_observation():
    gen = Counting()
    histories = {"aux": (Turn("old", "try b"),), "main": ()}
    answer_turn(gen, UpperEnv(), [Ask(TASKS[0], histories, aligned(1, 2))], SAMPLING)
    assert gen.calls[0][0] == ("aux", "try b", 1)


def test_observation_shows_earlier_actions_only_in_a_sequential_env():
    seen = {"aux": "X"}
    assert observation(UpperEnv(), TASKS[0], "main", seen)[-1]["content"] == "t0 for main"
    assert observation(InOrderUpperEnv(), TASKS[0], "main", seen)[-1]["content"] == (
        "t0 for main: aux did X"
    )
    assert observation(InOrderUpperEnv(), TASKS[0], "aux", {})[-1]["content"] == "t0 for aux"


def test_a_generator_that_drops_completions_is_named():
    class Short(Counting):
        def generate(self, requests, sampling):
            return [
                Generation(g.agent, g.texts[:1], [], [], 0.0, 1)
                for g in super().generate(requests, sampling)
            ]

    with pytest.raises(ValueError, match="asked aux for 2 completions, got 1"):
        answer_turn(Short(), UpperEnv(), [Ask(TASKS[0], fresh(), aligned(2, 2))], SAMPLING)
