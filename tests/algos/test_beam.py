"""Beam search over joint multi-turn trajectories and best-of-M (orchestry/algos/beam.py).

The unit tests drive a tiny word environment (the reward is the share of the task's words each
agent's answer holds; the feedback asks for the missing ones) with a scripted generator whose
revisions add what the feedback asked for, so revising helps. The last test runs the real embedded
model on the real code environment.
"""

import itertools
import random
import time
from dataclasses import dataclass

import pytest
from conftest import ROOT, cpu_params

from orchestry.agents.base import Generation, GenRequest, SamplingSpec
from orchestry.algos.beam import BeamSettings, beam_search, best_of, joint_leaves, search_rows
from orchestry.envs.base import Outcome, Roles, Turn, with_history

SAMPLING = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8)


@dataclass(frozen=True)
class Task:
    id: str
    words: tuple[str, ...]


class WordEnv:
    """Each agent should name every word of the task; feedback asks for the missing ones."""

    roles = Roles(("aux",), "main")
    sequential = False  # the agents answer a turn at once

    def __init__(self) -> None:
        self.score_calls: list[int] = []  # batch size of each env.score call
        self.outcomes: list[Outcome] = []  # every outcome handed out
        self.seen: list[tuple[str, str, tuple[Turn, ...]]] = []  # (task, agent, history) observed

    def observe(self, task, agent, history=()):
        self.seen.append((task.id, agent, tuple(history)))
        return with_history([{"role": "user", "content": f"{task.id} for {agent}"}], history)

    def act(self, task, agent, text):
        return text.strip()

    def score(self, batch):
        self.score_calls.append(len(batch))
        out = [self._outcome(task, actions) for task, actions in batch]
        self.outcomes.extend(out)
        return out

    def _outcome(self, task, actions):
        missing = {a: [w for w in task.words if w not in act.split()] for a, act in actions.items()}
        total = sum(1 - len(m) / len(task.words) for m in missing.values())
        record = {"reward": {"total": total}, "missing": missing}
        return Outcome(total, {"total": total}, record, notes=str(missing))

    def feedback(self, outcome, agent, advice=None):
        missing = outcome.record["missing"][agent]
        return "add " + " ".join(missing) if missing else "all there"

    def reference(self, task, agent):
        return None


class InOrderEnv(WordEnv):
    """The same task with agents acting in role order: main sees aux's action."""

    sequential = True

    def observe_after(self, task, agent, earlier, history=()):
        self.seen.append((task.id, agent, tuple(history)))
        shown = " ".join(f"{b} wrote: {a}" for b, a in earlier.items())
        first = [{"role": "user", "content": f"{task.id} for {agent}; {shown}"}]
        return with_history(first, history)


class Scripted:
    """First answers come from a per-agent script (cycled); a revision repeats the agent's last
    answer plus the words the feedback asked for."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.first = {a: itertools.cycle(texts) for a, texts in script.items()}
        self.calls: list[list[GenRequest]] = []

    def generate(self, requests, sampling):
        self.calls.append(list(requests))
        out = []
        for r in requests:
            last = r.messages[-1]["content"]
            if last.startswith("add "):
                texts = [f"{r.messages[-2]['content']} {last[4:]}"] * r.n
            else:
                texts = [next(self.first[r.agent]) for _ in range(r.n)]
            ids = [[1] * len(t.split()) for t in texts]
            out.append(Generation(r.agent, texts, ids, [0], 0.0, sum(map(len, ids))))
        return out


def settings(**changes) -> BeamSettings:
    base = {"width": 2, "k": 2, "turns": 1, "success": None, "max_joint": 4, "seed": 0}
    return BeamSettings(**{**base, **changes})


def test_beam_keeps_width_states_and_picks_the_best():
    env, gen = WordEnv(), Scripted({"aux": ["a", "x", "a b", "y"], "main": ["x", "a b", "b", "z"]})
    task = Task("t", ("a", "b"))
    (s,) = beam_search(gen, env, [task], settings(width=3, k=4, max_joint=16), SAMPLING)
    # aux totals 0.5, 0, 1, 0; main 0, 1, 0.5, 0: the 16 joint totals' top three
    joint = sorted((x + y for x in (0.5, 0, 1, 0) for y in (0, 1, 0.5, 0)), reverse=True)
    assert s.trace == [{"turn": 1, "expanded": 1, "candidates": 16, "kept": joint[:3], "best": 2.0}]
    assert s.actions == {"aux": "a b", "main": "a b"} and s.texts == s.actions
    assert s.outcome.total == 2.0 and any(s.outcome is o for o in env.outcomes)  # not rescored
    assert (s.turns, s.candidates, s.completions, s.new_tokens) == (1, 16, 8, 10)


def test_turn_two_revises_with_history_and_feedback():
    env, gen = WordEnv(), Scripted({"aux": ["a", "x"], "main": ["b", "y"]})
    task = Task("t", ("a", "b"))
    (s,) = beam_search(gen, env, [task], settings(width=2, turns=2), SAMPLING)
    turn1 = env.outcomes[:4]
    kept = sorted(turn1, key=lambda o: -o.total)[:2]  # the beam after turn 1
    later = [(a, h) for _, a, h in env.seen if h]
    assert len(later) == 4  # 2 beam states x 2 agents
    for agent, history in later:
        (turn,) = history
        assert turn.feedback in {env.feedback(o, agent) for o in kept}
        assert turn.feedback.startswith("add ")
    # the second turn's prompt ends with that feedback after the agent's own answer
    req = gen.calls[1][0]
    assert req.messages[-1]["role"] == "user" and req.messages[-1]["content"].startswith("add ")
    assert req.messages[-2]["role"] == "assistant"
    # revising helped: every agent added its missing words
    assert s.trace[0]["best"] < s.trace[1]["best"] == s.outcome.total == 2.0
    assert s.turns == 2 and s.candidates == 4 + 2 * 4


def test_early_stop_on_success_and_one_score_call_per_turn():
    env, gen = WordEnv(), Scripted({"aux": ["a"], "main": ["a"]})
    easy, hard = Task("easy", ("a",)), Task("hard", ("a", "b"))
    out = beam_search(gen, env, [easy, hard], settings(turns=3, success=2.0), SAMPLING)
    by = {s.task.id: s for s in out}
    assert by["easy"].turns == 1 and by["easy"].outcome.total == 2.0
    assert by["hard"].turns == 2 and by["hard"].outcome.total == 2.0  # revised, then stopped
    assert by["easy"].completions < by["hard"].completions
    assert (by["easy"].candidates, by["hard"].candidates) == (4, 4 + 2 * 4)
    assert env.score_calls == [8, 8]  # one call per turn, every task's candidates in it
    assert len(gen.calls) == 2  # agents at once: one generate call per turn
    assert all(r.messages[0]["content"].startswith("hard") for r in gen.calls[1])
    assert all(r.n == 2 for call in gen.calls for r in call)


def test_max_joint_cut_is_aligned_first_and_seeded():
    assert joint_leaves(3, 2, 2, random.Random(0)) == [(0, 0), (1, 1)]
    assert joint_leaves(2, 2, 9, random.Random(0)) == [(0, 0), (1, 1), (0, 1), (1, 0)]
    cut = joint_leaves(3, 2, 5, random.Random(7))
    assert cut[:3] == [(0, 0), (1, 1), (2, 2)] and len(set(cut)) == 5
    assert cut == joint_leaves(3, 2, 5, random.Random(7))
    assert len({tuple(joint_leaves(3, 2, 5, random.Random(s))) for s in range(20)}) > 1
    many = joint_leaves(4, 3, 20, random.Random(1))  # 64 combinations cut to 20
    assert len(set(many)) == 20 and many[:4] == [(i,) * 3 for i in range(4)]

    def run(seed):
        env, gen = WordEnv(), Scripted({"aux": ["a", "x", "b"], "main": ["b", "a", "y"]})
        chosen = settings(k=3, width=2, turns=2, max_joint=5, seed=seed)
        out = beam_search(gen, env, [Task("t", ("a", "b", "c"))], chosen, SAMPLING)
        return out, env, gen

    (s1,), env1, _ = run(3)
    (s2,), env2, _ = run(3)
    assert (s1.actions, s1.trace, env1.seen) == (s2.actions, s2.trace, env2.seen)
    assert s1.candidates == 5 + 2 * 5 and env1.score_calls == [5, 10]
    # cut to the aligned pairs, each agent samples only what is used (as the team protocol)
    env, gen = WordEnv(), Scripted({"aux": ["a"], "main": ["b"]})
    (s,) = beam_search(gen, env, [Task("t", ("a",))], settings(k=3, max_joint=2), SAMPLING)
    assert [r.n for r in gen.calls[0]] == [2, 2] and s.candidates == 2 and s.completions == 4


def test_best_of_draws_exactly_the_budget_and_keeps_the_best():
    env, gen = WordEnv(), Scripted({"aux": ["x", "a", "y", "a"], "main": ["y", "a", "x", "a"]})
    tasks = [Task("t1", ("a",)), Task("t2", ("a",))]
    out = best_of(gen, env, tasks, [3, 1], SAMPLING, seed=0)
    assert env.score_calls == [4] and len(gen.calls) == 1
    assert [r.n for r in gen.calls[0]] == [3, 3, 1, 1]
    assert [s.candidates for s in out] == [3, 1] and [s.completions for s in out] == [6, 2]
    assert out[0].actions == {"aux": "a", "main": "a"} and out[0].outcome.total == 2.0
    assert out[1].actions == {"aux": "a", "main": "a"}  # the scripts' 4th answers
    assert all(s.turns == 1 for s in out)
    with pytest.raises(ValueError, match="budget"):
        best_of(gen, env, tasks, [3], SAMPLING, seed=0)


class Forgetful(Scripted):
    """Revisions only add a useless word (ties with turn 1); each call takes 20 ms."""

    def generate(self, requests, sampling):
        time.sleep(0.02)
        out = super().generate(requests, sampling)
        for g, r in zip(out, requests, strict=True):
            if r.messages[-1]["content"].startswith("add "):
                g.texts = [f"{r.messages[-2]['content']} zz"] * r.n
        return out


def test_best_over_all_turns_and_time_shares():
    env, gen = WordEnv(), Forgetful({"aux": ["a", "x"], "main": ["b", "y"]})
    (s,) = beam_search(gen, env, [Task("t", ("a", "b"))], settings(turns=2), SAMPLING)
    assert s.turns == 2 and s.trace[1]["best"] == s.trace[0]["best"] == 1.0
    assert s.trace[1]["kept"] == [1.0, 1.0]  # the revisions tie with turn 1 ...
    assert s.actions == s.texts == {"aux": "a", "main": "b"}  # ... and ties keep the earliest
    assert s.outcome is env.outcomes[0]
    # each task's share of a batched call's wall time is its share of the completions
    env, gen = WordEnv(), Forgetful({"aux": ["a"], "main": ["a"]})
    small, big = best_of(gen, env, [Task("s", ("a",)), Task("b", ("a",))], [1, 3], SAMPLING, 0)
    assert big.seconds == pytest.approx(3 * small.seconds) and small.seconds >= 0.02 / 4


def test_sequential_env_expands_in_role_order():
    env, gen = InOrderEnv(), Scripted({"aux": ["a", "x"], "main": ["b", "y"]})
    (s,) = beam_search(gen, env, [Task("t", ("a", "b"))], settings(turns=2), SAMPLING)
    # per turn: aux first, then main once per aux sample, each seeing that sample
    assert [[r.agent for r in call] for call in gen.calls] == [
        ["aux"],
        ["main", "main"],
        ["aux", "aux"],
        ["main"] * 4,
    ]
    assert [r.n for r in gen.calls[1]] == [2, 2]  # a tree of k^A = 4 leaves
    shown = [r.messages[0]["content"] for r in gen.calls[1]]
    assert shown == ["t for main; aux wrote: a", "t for main; aux wrote: x"]
    assert env.score_calls == [4, 8] and s.outcome.total == 2.0
    # turn 2: both the first agent and the later one see their history and feedback
    assert {a for _, a, h in env.seen if h} == {"aux", "main"}
    assert all(r.messages[-1]["content"].startswith(("add", "all")) for r in gen.calls[3])
    # aligned cut in role order = the team protocol: main answers once per aux sample
    env, gen = InOrderEnv(), Scripted({"aux": ["a", "x"], "main": ["b", "y"]})
    best_of(gen, env, [Task("t", ("a", "b"))], [3], SAMPLING, seed=0)
    assert [[r.n for r in call] for call in gen.calls] == [[3], [1, 1, 1]]


def without_seconds(searches):
    """The searches' fields but the wall time (which differs between runs)."""
    return [{**vars(s), "seconds": None} for s in searches]


def test_judge_weight_zero_is_the_search_without_a_judge():
    calls = []

    def judge(task, actions):
        calls.append(actions)
        return 1.0

    def run(judge=None, **changes):
        env, gen = WordEnv(), Scripted({"aux": ["a", "x", "b"], "main": ["b", "a", "y"]})
        tasks = [Task("t", ("a", "b", "c")), Task("u", ("a",))]
        chosen = settings(k=3, width=2, turns=2, max_joint=5, seed=3, **changes)
        found = beam_search(gen, env, tasks, chosen, SAMPLING, judge)
        drawn = best_of(gen, env, tasks, [3, 2], SAMPLING, 0, judge, chosen.judge_weight)
        return found, drawn, env.seen, [[r.n for r in c] for c in gen.calls]

    plain = run()
    off = run(judge, judge_weight=0.0)
    assert calls == []  # weight 0: the judge is never asked
    assert [without_seconds(x) for x in plain[:2]] == [without_seconds(x) for x in off[:2]]
    assert plain[2:] == off[2:]  # the same prompts and the same draws
    rows = [search_rows("beam", found, 0) for found, *_ in (plain, off)]
    assert [{**r, "seconds": 0} for r in rows[0]] == [{**r, "seconds": 0} for r in rows[1]]
    assert all(
        "judge" not in r["search"] and "judge" not in r["search"]["trace"][0] for r in rows[1]
    )
    with pytest.raises(ValueError, match="needs a judge"):
        run(None, judge_weight=0.5)


def test_a_judge_reranks_the_beam_and_the_best_but_not_the_return():
    # totals: (a b, a b) 2, (x, y) 0, (a b, y) 1, (x, a b) 1; the judge likes main's "y" alone
    task = Task("t", ("a", "b"))
    calls = []

    def judge(t, actions):
        calls.append((t.id, dict(actions)))
        return 1.0 if actions["main"] == "y" else (None if actions["aux"] == "x" else 0.0)

    def run(judge=None, **changes):
        env, gen = WordEnv(), Scripted({"aux": ["a b", "x"], "main": ["a b", "y"]})
        chosen = settings(k=2, width=2, max_joint=4, **changes)
        (s,) = beam_search(gen, env, [task], chosen, SAMPLING, judge)
        return s, env

    grounded, _ = run()
    assert grounded.actions == {"aux": "a b", "main": "a b"} and grounded.trace[0]["kept"] == [2, 1]
    judged, env = run(judge, judge_weight=1.5)
    assert len(calls) == 4 and all(t == "t" for t, _ in calls)
    # values: (a b, y) 1 + 1.5 = 2.5 > (a b, a b) 2 + 0 > (x, y) 0 + 1.5 > (x, a b) 1 + 0 (None: 0)
    assert judged.actions == {"aux": "a b", "main": "y"}
    assert judged.trace == [
        {"turn": 1, "expanded": 1, "candidates": 4, "kept": [1, 2], "best": 1, "judge": [1.0, 0.0]}
    ]
    assert (judged.judge, judged.value) == (1.0, 2.5)
    assert judged.outcome.total == 1 and any(judged.outcome is o for o in env.outcomes)
    (row,) = search_rows("beam", [judged], 0)
    assert row["reward"] == {"total": 1} and row["code"] == judged.actions  # the grounded return
    assert (row["search"]["judge"], row["search"]["value"]) == (1.0, 2.5)
    # the early stop stays grounded: (a b, a b) reached 2 at turn 1, though (a b, y) is kept best
    stopped, _ = run(judge, judge_weight=1.5, turns=2, success=2.0)
    assert stopped.turns == 1 and stopped.actions == {"aux": "a b", "main": "y"}
    # best-of-M ranks by the same value: its aligned pairs are (a b, a b) 2 and (x, y) 0 + 3
    env, gen = WordEnv(), Scripted({"aux": ["a b", "x"], "main": ["a b", "y"]})
    (plain,) = best_of(gen, env, [task], [2], SAMPLING, 0)
    env, gen = WordEnv(), Scripted({"aux": ["a b", "x"], "main": ["a b", "y"]})
    (drawn,) = best_of(gen, env, [task], [2], SAMPLING, 0, judge, 3.0)
    assert plain.actions == {"aux": "a b", "main": "a b"} and plain.value is None
    assert drawn.actions == {"aux": "x", "main": "y"} and drawn.outcome.total == 0
    assert search_rows("best_of", [drawn], 0)[0]["reward"] == {"total": 0}


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: with the second core busy, two threads made generation ~60x slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_real_model_on_the_code_env(one_torch_thread):
    from orchestry.envs.code.problems import load_problem_dir
    from orchestry.eval.metrics import compute_metrics
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec

    params = cpu_params({"sampling": {"max_new_tokens": 24}})
    policy, env = make_policy(params), make_env(params)
    problems = load_problem_dir(ROOT / "data/coop")[:1]
    sampling = sampling_spec(params)
    chosen = BeamSettings(width=2, k=2, turns=2, success=None, max_joint=4, seed=0)
    beams = beam_search(policy, env, problems, chosen, sampling)
    assert [s.candidates for s in beams] == [4 + 2 * 4]
    assert beams[0].completions == 2 * 2 + 2 * 2 * 2
    bests = best_of(policy, env, problems, [s.candidates for s in beams], sampling, seed=0)
    for s, expect in zip([*beams, *bests], [2, 1], strict=True):
        assert s.turns == expect and set(s.actions) == set(env.roles.agents) == set(s.texts)
        assert s.new_tokens > 0 and s.seconds > 0 and len(s.trace) == expect
        assert s.outcome.total == max(max(t["kept"]) for t in s.trace)
    assert bests[0].completions == 2 * bests[0].candidates
    for method, found in (("beam", beams), ("best_of", bests)):
        rows = search_rows(method, found, 0)
        metrics = compute_metrics(rows, [1], 100, 0)
        assert metrics["problems"] == 1 and 0 <= metrics["pass@1"] <= 1
        assert rows[0]["search"]["candidates"] == 12 and "correct" in rows[0]
