"""Which problems each training step takes: the fixed plan, or a curriculum by measured success.

`schedule_problems` is the data order: a seeded permutation of the split per epoch, cut into steps
(`train.curriculum: by_grade`: each epoch from the easiest grade to the hardest).
`Curriculum` (`train.curriculum: easy_first`) keeps the plan's first epoch, so every problem is
measured once, then draws each step's problems by how well the team now solves them: easy problems
first, and once mastered they drop back and harder ones take their place.

The rule, at step s after the first epoch: a problem's success is the mean test pass rate of its
first-turn joint actions over its last `WINDOW` visits; its weight is success + `FLOOR` while
success < `promote`, and `FLOOR` once mastered (success >= `promote`); the step takes
`problems_per_step` distinct problems drawn with probability proportional to the weights, from a
generator seeded by (seed, s). The draws depend only on the seed, the step and the measured
successes, so a run resumed from a checkpoint that kept `state()` takes the same steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

FLOOR = 0.05
"""Weight added to every unmastered problem's success, and the whole weight of a mastered one."""
WINDOW = 2
"""Visits a problem's success is measured over (the most recent ones)."""
_STREAM = 0xC0
"""Keeps the draws' generator apart from `schedule_problems`' per-epoch ones."""


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


def schedule_problems(
    problems: Sequence[_Identified],
    per_step: int,
    epochs: int,
    seed: int,
    grade: Callable[[Any], int] | None = None,
) -> list[list[str]]:
    """The data order: a seeded permutation per epoch, cut into steps of `per_step` problem ids.
    With `grade` (`train.curriculum: by_grade`), each epoch's permutation is stably sorted by it, so
    an epoch runs from the lowest grade to the highest and in seeded order within a grade."""
    steps: list[list[str]] = []
    ids = [p.id for p in problems]
    for epoch in range(epochs):
        order = list(np.random.default_rng([seed, epoch]).permutation(len(ids)))
        if grade is not None:
            order.sort(key=lambda j: grade(problems[j]))
        for i in range(0, len(order), per_step):
            steps.append([ids[j] for j in order[i : i + per_step]])
    return steps


@dataclass
class Curriculum:
    """Easy first, promote on success: the plan's first epoch, then draws weighted by success."""

    plan: list[list[str]]
    """The fixed plan (`schedule_problems`); its first epoch is taken as it is."""
    ids: list[str]
    """Every problem of the split, in the split's order (the order of the weights)."""
    per_step: int
    """Problems a step draws (at most all of them)."""
    promote: float
    """Success at which a problem counts as mastered."""
    seed: int
    recent: dict[str, list[list[float]]] = field(default_factory=dict)
    """Per problem, the per-sample successes at each of its last `WINDOW` visits, oldest first."""

    @property
    def first_epoch(self) -> int:
        """Steps of the plan's first epoch."""
        return -(-len(self.ids) // self.per_step)

    def problems(self, step: int) -> list[str]:
        """The problem ids step `step` takes."""
        if step < self.first_epoch:
            return list(self.plan[step])
        weights = self.weights()
        rng = np.random.default_rng([self.seed, step, _STREAM])
        size = min(self.per_step, len(self.ids))
        drawn = rng.choice(len(self.ids), size=size, replace=False, p=weights / weights.sum())
        return [self.ids[i] for i in drawn]

    def observe(self, samples: Iterable[tuple[str, float]]) -> None:
        """Record one step's visits: (problem id, success of one joint action) pairs."""
        visit: dict[str, list[float]] = {}
        for pid, success in samples:
            visit.setdefault(pid, []).append(float(success))
        for pid, values in visit.items():
            self.recent[pid] = [*self.recent.get(pid, []), values][-WINDOW:]

    def success(self, pid: str) -> float | None:
        """Mean success over the problem's last visits; None if never visited."""
        values = [v for visit in self.recent.get(pid, []) for v in visit]
        return float(np.mean(values)) if values else None

    def weights(self) -> np.ndarray:
        """Each problem's draw weight (a never-visited problem counts as success 0)."""
        out = []
        for pid in self.ids:
            success = self.success(pid) or 0.0
            out.append(FLOOR if success >= self.promote else success + FLOOR)
        return np.array(out)

    def mastered(self) -> int:
        """How many problems have reached `promote`."""
        return sum((self.success(pid) or 0.0) >= self.promote for pid in self.ids)

    def state(self) -> dict[str, list[list[float]]]:
        """What a checkpoint keeps to resume the same draws."""
        return {pid: [list(v) for v in visits] for pid, visits in self.recent.items()}

    def restore(self, state: Mapping[str, Sequence[Sequence[float]]]) -> None:
        """Continue from a checkpoint's `state()`."""
        self.recent = {pid: [list(v) for v in visits] for pid, visits in state.items()}
