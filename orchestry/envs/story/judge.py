"""The offline story judge: the quality part of the reward from measurable properties of the text.

No API and no model: deterministic, so a run reproduces. Five checks, each in [0, 1], averaged:
- **arc**: the protagonist is named; the opening mentions the setting or theme; a complication cue
  (`but`, `suddenly`, `lost`, ...) comes after the opening; an ending cue (`finally`, `home`,
  `smiled`, ...) is in the last part. Half credit where a cue is present but out of place.
- **coherence**: each part shares content words with the parts before it (three shared words is
  full credit); a part that drops the protagonist for a new name counts half.
- **repetition**: repeated word 3-grams (beyond a few, which good prose has) and repeated sentences
  cost.
- **length**: the word count in `words_range` is full credit; under it, the fraction reached; over
  it, one minus the excess relative to the upper bound.
- **meta**: chat text (`As an AI`, `Here is`, `Let me know`), headings and echoed instructions cost
  0.4 each.

"Parts" are the story's paragraphs, or (a story in one paragraph) its sentences in three groups. A
judge callable (`env.StoryJudge`, e.g. Claude) can replace this score; this one is the fallback.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from orchestry.envs.story import prose
from orchestry.envs.story.tasks import StoryTask

COMPLICATION_CUES = frozenset(
    """but suddenly however until problem trouble storm lost broke broken afraid fear scared danger
    dark missing wrong strange trapped stuck fell failed worried angry alone cried nobody gone
    stopped sick hurt blocked late empty accident disappeared vanished crack noise forgot sad
    cold wind fire""".split()
)
ENDING_CUES = frozenset(
    """finally last end ever forever home smiled smile laughed safe learned realized together
    peace proud happy happily thanked hugged glad saved found fixed solved won returned
    celebrated cheered relief relieved always grateful rest slept""".split()
)
_META = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bas an ai\b",
        r"\blanguage model\b",
        r"^(sure|certainly|of course|okay)\b",
        r"\bhere('s| is| are)\b[^.!?\n]{0,60}\b(story|part|opening|ending|continuation)\b",
        r"\bi hope (you|this)\b",
        r"\blet me know\b",
        r"\bfeel free\b",
        r"\bi('d| would) be happy\b",
        r"^\s*#",
        r"\btitle\s*:",
        r"\b(theme|main character|protagonist|setting)\s*:",
        r"\bpart \d+( of \d+)?\b",
        r"\b(writer|editor|narrator)\s*:",
        r"\b\d+\s*-\s*\d+ sentences\b",
        r"\b(write|rewrite) (only )?your part\b",
        r"\bno (commentary|title)\b",
        r"\[[^\]]{1,40}\]",
    )
]
_FINISHED = re.compile(r"[.!?][\"'”’)]*\s*$")
REPEAT_ALLOWANCE = 0.04
"""The fraction of repeated word 3-grams a good story may have (`the old lighthouse` twice)."""
SHARED_FOR_FULL_LINK = 3
"""Content words a part shares with the earlier parts for full coherence (and collaboration)."""


@dataclass(frozen=True)
class QualityReport:
    """The offline judge's checks on one story, each in [0, 1], and what went wrong in words."""

    arc: float
    coherence: float
    repetition: float
    length: float
    meta: float
    issues: tuple[str, ...]
    """What went wrong, in words, but for the links between parts (the env's collaboration part
    names those role by role)."""
    coherence_issues: tuple[str, ...]
    """Which parts share little with the parts before them."""

    @property
    def score(self) -> float:
        return (self.arc + self.coherence + self.repetition + self.length + self.meta) / 5

    def checks(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if not k.endswith("issues")}


def story_chunks(story: str) -> list[str]:
    """The story's parts for the judge: paragraphs, or sentences in up to three groups."""
    paragraphs = prose.paragraphs(story)
    if len(paragraphs) >= 2:
        return paragraphs
    sentences = prose.sentences(story)
    n = min(3, len(sentences))
    if n == 0:
        return []
    size, extra = divmod(len(sentences), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (i < extra)
        chunks.append(" ".join(sentences[start:end]))
        start = end
    return chunks


def has_cue(text: str, cues: frozenset[str]) -> bool:
    return any(w.lower() in cues for w in prose.words(text))


def link_score(part: str, earlier: str, task: StoryTask, protagonist_free: bool = False) -> float:
    """How much `part` carries `earlier` forward: shared content words, three for full credit
    (`protagonist_free`: the protagonist's name does not count, it is scored on its own)."""
    shared = prose.content_words(part) & prose.content_words(earlier)
    if protagonist_free:
        shared.discard(task.protagonist.lower())
    return min(1.0, len(shared) / SHARED_FOR_FULL_LINK)


def new_names(part: str, earlier: str, task: StoryTask) -> set[str]:
    """Names in `part` that neither the task nor the earlier text has."""
    text = f"{task.protagonist} {task.theme} {task.setting} {earlier}"
    known = {w.lower().removesuffix("'s") for w in prose.words(text)}
    return {n for n in prose.names(part) if n.lower() not in known}


def _arc(task: StoryTask, chunks: list[str], issues: list[str]) -> float:
    story = " ".join(chunks)
    named = prose.mentions(story, task.protagonist)
    if not named:
        issues.append(f"the protagonist {task.protagonist} is never named")
    place = prose.content_words(f"{task.setting} {task.theme}")
    if place & prose.content_words(chunks[0]):
        setting = 1.0
    else:
        setting = 0.5 if place & prose.content_words(story) else 0.0
        issues.append("the opening does not show the setting")
    if len(chunks) > 1 and has_cue(" ".join(chunks[1:]), COMPLICATION_CUES):
        complication = 1.0
    else:
        complication = 0.5 if has_cue(story, COMPLICATION_CUES) else 0.0
        issues.append("nothing goes wrong after the opening")
    if len(chunks) > 1 and has_cue(chunks[-1], ENDING_CUES):
        ending = 1.0
    else:
        ending = 0.5 if has_cue(story, ENDING_CUES) else 0.0
        issues.append("the last part does not end the story")
    if not _FINISHED.search(story):
        ending /= 2
        issues.append("the story stops mid-sentence")
    return (float(named) + setting + complication + ending) / 4


def _coherence(task: StoryTask, chunks: list[str], issues: list[str]) -> float:
    if len(chunks) < 2:
        issues.append("the story is too short to have connected parts")
        return 0.0
    links = []
    for i in range(1, len(chunks)):
        earlier = " ".join(chunks[:i])
        link = link_score(chunks[i], earlier, task)
        strangers = new_names(chunks[i], earlier, task)
        if strangers and not prose.mentions(chunks[i], task.protagonist):
            link *= 0.5
            issues.append(
                f"part {i + 1} is about {', '.join(sorted(strangers))}, not the protagonist"
            )
        elif link < 1.0:
            issues.append(f"part {i + 1} shares little with the parts before it")
        links.append(link)
    return sum(links) / len(links)


def _repetition(story: str, issues: list[str]) -> float:
    tokens = [w.lower() for w in prose.words(story)]
    grams = list(zip(tokens, tokens[1:], tokens[2:], strict=False))
    repeated = 1 - len(set(grams)) / len(grams) if grams else 0.0
    normal = [" ".join(w.lower() for w in prose.words(s)) for s in prose.sentences(story)]
    normal = [s for s in normal if s]
    dup_sentences = len(normal) - len(set(normal))
    if dup_sentences:
        issues.append(f"the story repeats {dup_sentences} sentence(s)")
    elif repeated > REPEAT_ALLOWANCE:
        issues.append("the story repeats phrases")
    dup_share = dup_sentences / len(normal) if normal else 0.0
    return max(0.0, 1 - 4 * max(0.0, repeated - REPEAT_ALLOWANCE) - 2 * dup_share)


def length_score(n_words: int, words_range: tuple[int, int]) -> float:
    lo, hi = words_range
    if n_words < lo:
        return n_words / lo
    return max(0.0, 1 - (n_words - hi) / hi) if n_words > hi else 1.0


def meta_hits(story: str) -> list[str]:
    """The chat text, headings and echoed instructions in a story, as found."""
    hits = []
    for line in prose.paragraphs(story.replace("\n", "\n\n")):
        hits += [m.group(0) for pattern in _META for m in pattern.finditer(line)]
    return hits


def judge_quality(task: StoryTask, story: str, words_range: tuple[int, int]) -> QualityReport:
    """The offline judge's report on one story (the roles' parts joined)."""
    n_words = len(prose.words(story))
    if n_words == 0:
        return QualityReport(0.0, 0.0, 0.0, 0.0, 0.0, ("the story is empty",), ())
    issues: list[str] = []
    coherence_issues: list[str] = []
    chunks = story_chunks(story)
    arc = _arc(task, chunks, issues)
    coherence = _coherence(task, chunks, coherence_issues)
    repetition = _repetition(story, issues)
    length = length_score(n_words, words_range)
    if length < 1.0:
        side = "under" if n_words < words_range[0] else "over"
        issues.append(f"{n_words} words, {side} the range {words_range[0]}-{words_range[1]}")
    hits = meta_hits(story)
    if hits:
        issues.append(f"chat text in the story ({', '.join(repr(h) for h in hits[:3])})")
    meta = max(0.0, 1 - 0.4 * len(hits))
    return QualityReport(
        arc, coherence, repetition, length, meta, tuple(issues), tuple(coherence_issues)
    )
