"""The curricula: `train.curriculum: by_grade` (each epoch easiest grade first) and `easy_first` (the
plan's first epoch, then success-weighted draws)."""

import pickle
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from orchestry.algos.curriculum import FLOOR, WINDOW, Curriculum, schedule_problems


@dataclass
class P:
    id: str


IDS = [f"p{i}" for i in range(6)]


def curriculum(per_step: int = 2, promote: float = 0.75, seed: int = 3) -> Curriculum:
    plan = schedule_problems([P(i) for i in IDS], per_step, epochs=4, seed=seed)
    return Curriculum(plan, list(IDS), per_step, promote, seed)


def measured(c: Curriculum, success: dict[str, float]) -> Curriculum:
    """`c` after one visit of every problem, each of its 4 joint actions at `success[id]`."""
    c.observe((pid, s) for pid, s in success.items() for _ in range(4))
    return c


def test_first_epoch_follows_the_plan():
    c = curriculum()
    assert c.first_epoch == 3
    assert [c.problems(s) for s in range(3)] == c.plan[:3]
    assert sorted(pid for s in range(3) for pid in c.problems(s)) == sorted(IDS)


def test_draws_are_distinct_and_take_problems_per_step():
    c = measured(curriculum(per_step=4), dict.fromkeys(IDS, 0.3))
    for step in range(3, 40):
        ids = c.problems(step)
        assert len(ids) == len(set(ids)) == 4


def test_weights_favour_easy_problems_and_mastered_ones_drop_back():
    success = {"p0": 0.0, "p1": 0.2, "p2": 0.5, "p3": 0.7, "p4": 0.75, "p5": 1.0}
    c = measured(curriculum(), success)
    w = c.weights()
    assert w.tolist() == pytest.approx([FLOOR, 0.25, 0.55, 0.75, FLOOR, FLOOR])
    assert c.mastered() == 2
    counts = Counter(pid for step in range(3, 2003) for pid in c.problems(step))
    assert counts["p3"] > counts["p2"] > counts["p1"] > counts["p0"]
    assert counts["p3"] > 4 * counts["p4"]  # mastered: drawn as rarely as an unsolved problem
    assert counts["p4"] == pytest.approx(counts["p0"], rel=0.3)


def test_success_is_the_mean_over_the_last_visits():
    c = curriculum()
    c.observe([("p0", 0.0), ("p0", 1.0), ("p1", 0.5)])
    c.observe([("p0", 1.0), ("p0", 1.0)])
    assert c.success("p0") == pytest.approx(0.75)  # both visits, every joint action
    c.observe([("p0", 0.0), ("p0", 0.0)])
    assert len(c.recent["p0"]) == WINDOW
    assert c.success("p0") == pytest.approx(0.5)  # the first visit fell out of the window
    assert c.success("p1") == 0.5
    assert c.success("p2") is None


def test_same_inputs_give_the_same_draws():
    success = dict(zip(IDS, np.linspace(0, 1, len(IDS)), strict=True))
    a, b = measured(curriculum(), success), measured(curriculum(), success)
    assert [a.problems(s) for s in range(3, 30)] == [b.problems(s) for s in range(3, 30)]
    other = measured(curriculum(seed=4), success)
    assert [a.problems(s) for s in range(3, 30)] != [other.problems(s) for s in range(3, 30)]


def run(c: Curriculum, steps: range, rng: np.random.Generator) -> list[list[str]]:
    """Take `steps` with made-up successes (the same for the same draws), observing each."""
    taken = []
    for step in steps:
        ids = c.problems(step)
        c.observe((pid, float(rng.random())) for pid in ids for _ in range(4))
        taken.append(ids)
    return taken


def test_restored_state_draws_as_the_uninterrupted_run():
    uninterrupted = curriculum()
    whole = run(uninterrupted, range(20), np.random.default_rng(0))

    rng = np.random.default_rng(0)
    first = curriculum()
    head = run(first, range(8), rng)
    saved = pickle.loads(pickle.dumps(first.state()))  # as the checkpoint keeps it
    resumed = curriculum()
    resumed.restore(saved)
    assert head + run(resumed, range(8, 20), rng) == whole
    assert resumed.state() == uninterrupted.state()
    assert any(whole[s] != uninterrupted.plan[s] for s in range(3, 20))  # the curriculum drew


def test_schedule_problems_is_the_fixed_plan():
    plan = schedule_problems([P(i) for i in IDS], 4, epochs=2, seed=0)
    assert [len(s) for s in plan] == [4, 2, 4, 2]
    assert sorted(plan[0] + plan[1]) == sorted(IDS) == sorted(plan[2] + plan[3])


def test_by_grade_runs_each_epoch_from_the_easiest_grade_in_seeded_order_within_one():
    grades = {f"p{k}": k % 3 for k in range(6)}  # p0, p3: 0; p1, p4: 1; p2, p5: 2
    plain = schedule_problems([P(i) for i in IDS], 1, epochs=2, seed=5)
    graded = schedule_problems(
        [P(i) for i in IDS], 1, epochs=2, seed=5, grade=lambda p: grades[p.id]
    )
    for epoch in (graded[:6], graded[6:]):
        order = [s[0] for s in epoch]
        assert [grades[i] for i in order] == [0, 0, 1, 1, 2, 2] and sorted(order) == sorted(IDS)
    for e in (0, 1):  # within a grade, the plain plan's order
        plain_order = [s[0] for s in plain[6 * e : 6 * e + 6]]
        graded_order = [s[0] for s in graded[6 * e : 6 * e + 6]]
        assert graded_order == sorted(plain_order, key=lambda i: grades[i])
