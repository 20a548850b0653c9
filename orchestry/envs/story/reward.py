"""The story reward's weights and its two transcript parts: collaboration and efficiency.

total = quality_weight * quality + collaboration_weight * collaboration + efficiency_weight *
efficiency, each part in [0, 1]. Quality is the judge's (judge.py, or a judge callable).

**Collaboration** ("yes, and") scores each part after the first against the parts before it: half
for content words carried forward (three shared words is full credit), half for keeping the
protagonist's name. The link is halved when the part restarts the story (`Once upon a time`, the
protagonist introduced again), when it puts a new name in place of the protagonist, and when it
moves the story to another kind of place (space in a sea story). An empty part's link is 0.
Collaboration is the mean link.

**Efficiency**: the first form of the product counted conversation turns against a target range
(a bonus under it, a penalty over it). Here all roles write at once, so a story "turn" is a
paragraph of the joined story (each role writes one or more): efficiency is 1 when the number of
paragraphs is within or under `turns_range` and every role wrote something, falls by 0.25 per
paragraph over the upper bound (floor 0), and is 0 when any role's part is empty.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestry.envs.story import prose
from orchestry.envs.story.judge import link_score, new_names
from orchestry.envs.story.tasks import StoryTask

OVER_RANGE_COST = 0.25
"""Efficiency lost per paragraph over `turns_range`'s upper bound."""

PLACES = {
    "the sea": "sea ocean ship boat boats wave waves shore beach harbor harbour island sailor tide",
    "space": "space planet planets spaceship starship rocket galaxy orbit astronaut alien aliens",
    "a city": "city street streets subway skyscraper traffic downtown apartment",
    "a forest": "forest forests woods tree trees pine oak",
    "a school": "school classroom teacher teachers student students homework lesson",
    "a desert": "desert sand dune dunes camel camels oasis",
    "the mountains": "mountain mountains peak summit cliff glacier",
    "a farm": "farm village field fields barn harvest",
}
"""Kinds of place, by words that show them (a part that moves the story elsewhere)."""
_PLACE_WORDS = {place: frozenset(ws.split()) for place, ws in PLACES.items()}
_RESTART = re.compile(
    r"^(once upon a time|long,? long ago|long ago|there (once )?(was|lived)|in a (land|kingdom|"
    r"village|town|city|world) far|one day,? there was)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class StorySettings:
    """The story reward's weights and ranges (params: the story env's section)."""

    quality_weight: float
    """Weight of the judge's story quality."""
    collaboration_weight: float
    """Weight of the parts building on each other ("yes, and")."""
    efficiency_weight: float
    """Weight of the paragraph count within `turns_range` with every role contributing."""
    turns_range: tuple[int, int]
    """(lo, hi) paragraphs of the joined story; over hi costs 0.25 each."""
    words_range: tuple[int, int]
    """(lo, hi) words of the joined story for full length credit in the offline judge."""

    def __post_init__(self) -> None:
        weights = (self.quality_weight, self.collaboration_weight, self.efficiency_weight)
        if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"story reward weights must be >= 0 with a positive sum: {weights}")
        for name in ("turns_range", "words_range"):
            bounds = tuple(getattr(self, name))  # params may give a list
            if len(bounds) != 2 or not all(isinstance(b, int) for b in bounds):
                raise ValueError(f"story {name} must be two integers (lo, hi): {bounds}")
            if not 1 <= bounds[0] <= bounds[1]:
                raise ValueError(f"story {name} must have 1 <= lo <= hi: {bounds}")
            object.__setattr__(self, name, bounds)

    def total(self, quality: float, collaboration: float, efficiency: float) -> float:
        return (
            self.quality_weight * quality
            + self.collaboration_weight * collaboration
            + self.efficiency_weight * efficiency
        )


def _places(text: str, min_words: int = 2) -> set[str]:
    """The kinds of place `text` shows with at least `min_words` distinct words."""
    lower = {w.lower() for w in prose.words(text)}
    return {place for place, ws in _PLACE_WORDS.items() if len(ws & lower) >= min_words}


def _restarts(part: str, task: StoryTask) -> str | None:
    """The words with which `part` starts the story over, or None."""
    first = (prose.sentences(part) or [""])[0]
    match = _RESTART.match(first)
    if match:
        return match.group(0)
    name = re.escape(task.protagonist)
    again = re.search(rf"\b(named|called) {name}\b|^{name} (was|is) an? \w+", first)
    return again.group(0) if again else None


def collaboration(task: StoryTask, parts: Sequence[tuple[str, str]]) -> tuple[float, list[str]]:
    """The mean link of each part (after the first) to the parts before it, and the issues found.

    `parts`: (agent, its part) in role order.
    """
    issues: list[str] = []
    task_places = _places(f"{task.setting} {task.theme}", min_words=1)
    links = []
    for i in range(1, len(parts)):
        agent, part = parts[i]
        earlier = " ".join(p for _, p in parts[:i])
        if not part.strip():
            links.append(0.0)
            continue  # an empty part is named once, in the efficiency issues
        carry = link_score(part, earlier, task, protagonist_free=True) if earlier.strip() else 0.0
        kept = prose.mentions(part, task.protagonist)
        link = 0.5 * carry + 0.5 * kept
        if not kept:
            issues.append(f"the protagonist {task.protagonist} is missing from the {agent}'s part")
        if carry < 1.0:
            issues.append(f"the {agent}'s part carries little forward from the parts before it")
        restart = _restarts(part, task)
        if restart:
            link *= 0.5
            issues.append(f"the {agent}'s part starts the story over ({restart!r})")
        strangers = new_names(part, earlier, task)
        if strangers and not kept:
            link *= 0.5
            issues.append(
                f"the {agent}'s part puts {', '.join(sorted(strangers))} in place of the protagonist"
            )
        elsewhere = _places(part) - task_places - _places(earlier)
        if elsewhere and not (_places(part) & task_places):
            link *= 0.5
            issues.append(f"the {agent}'s part moves the story to {', '.join(sorted(elsewhere))}")
        links.append(link)
    return (sum(links) / len(links) if links else 0.0), issues


def efficiency(
    parts: Sequence[tuple[str, str]], turns_range: tuple[int, int]
) -> tuple[float, int, list[str]]:
    """Efficiency, the joined story's paragraph count, and the issues found (see module doc)."""
    empty = [agent for agent, part in parts if not part.strip()]
    n = sum(len(prose.paragraphs(part)) for _, part in parts)
    issues = []
    if empty:
        who = f"{empty[0]}'s part is" if len(empty) == 1 else f"parts of {', '.join(empty)} are"
        issues.append(f"the {who} empty")
        return 0.0, n, issues
    hi = turns_range[1]
    if n > hi:
        issues.append(f"{n} paragraphs, {n - hi} over the range {turns_range[0]}-{hi}")
        return max(0.0, 1 - OVER_RANGE_COST * (n - hi)), n, issues
    return 1.0, n, issues
