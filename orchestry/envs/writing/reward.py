"""The paper's level reward for the two-part writing tasks (max 3.0 with the paper's weights).

    structure     each part's word count within the kind's bounds           paper weight 0.5
    coordination  length ratio part 2 / part 1 (characters) in the band     paper weight 1.0
    vocabulary    unique-word ratio part 2 / part 1 in the band             paper weight 0.5
    coherence     0.4 x transition categories + 0.6 x Jaccard of the parts  paper weight 1.0
    grounding     (ours) the parts' content words found in the source       weight 0 = the paper

Every part is in [0, 1] and the total is their weighted sum (weights: `WritingSettings`). The
paper (arXiv 2508.04652, "writing collaboration") names the aspects: structural wellness, style
consistency, logical coherence. The constants are the authors' reward code, OpenMLRL/
LLM_Collab_Writing `rewards/tldr_rewards.py` and `rewards/arxiv_rewards.py` as first released
(commit 3198dc9, Nov 2025; the arXiv length band 1.0-1.3 there is also what the repository's arXiv
logger and the reward's own docstring state; a later commit, 38252a5 of Dec 2025, moved it to
1.3-1.6 within 0.8-2.0):

                              TL;DR                    arXiv
    words per part            8-256                    128-256   (both times `length_scale`)
    length ratio: full, zero  1.6-3.2; <1.1, >5.0      1.0-1.3; <0.8, >1.5   (linear between)
    unique-word ratio         >=2.0; <1.3              0.7-1.3; <0.5, >1.7   (linear between)
    transitions counted in    part 2                   both parts
    Jaccard: full credit at   0.03                     0.23
    transition scale          0 with none; 0.4 for one category, +0.05 per further one (max 1)

Words are whitespace tokens for the bounds and lowercase `\\w+` runs otherwise; unique words count
every word, as the paper's reward code does (its docstring and its logger say "excluding
stopwords"; the code that trained the paper's agents does not exclude them); Jaccard leaves the
stopwords of `lexicon.py` out, as the paper does.

Departures (ours), each so the signal is graded and none of it comes free:
- The paper's levels are gated (a level counts only when the one before it passed) and structure is
  all-or-nothing. Here each part stands alone and structure is graded per part (n/low under the
  bounds, 1 - (n - high)/high over them), so mediocre text earns partial credit a small model can
  climb; `gated: true` restores the paper's rule exactly (binary structure, then the gates).
- The paper's word bounds suit 256 new tokens (Qwen3-1.7B); `length_scale` scales them (0.5 for
  128 new tokens).
- Transition words match as whole words and phrases; the paper matched substrings, so "as" in
  "was" or "if" in "different" counted and almost any text found several categories.
- Two texts without content words have Jaccard 0 (paper: 1.0, behind its gates; free without them).
- grounding: the share of each part's distinct content words found in the source's, averaged over
  the two parts, full credit at `GROUNDING_FULL` (0.5, our choice). A guard against text off the
  post or abstract; its weight 0 reproduces the paper and it is logged either way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from orchestry.envs.writing.lexicon import STOPWORDS, TRANSITIONS

PARTS = ("structure", "coordination", "vocabulary", "coherence", "grounding")
TRANSITION_WEIGHT, JACCARD_WEIGHT = 0.4, 0.6  # the paper's split of its style level
GROUNDING_FULL = 0.5  # ours: half of a part's distinct content words from the source = full credit


@dataclass(frozen=True)
class WritingSettings:
    """The writing reward's settings (values: params `env.writing`, the one home of defaults)."""

    structure: float
    """Weight of structure: each part's word count within its bounds (paper 0.5)."""
    coordination: float
    """Weight of coordination: the length ratio part 2 / part 1 in the kind's band (paper 1.0)."""
    vocabulary: float
    """Weight of vocabulary: the unique-word ratio part 2 / part 1 in the band (paper 0.5)."""
    coherence: float
    """Weight of coherence: transition words and word overlap between the parts (paper 1.0)."""
    grounding: float
    """Weight of grounding: the parts' content words found in the source (ours; paper 0)."""
    length_scale: float
    """The paper's word bounds (set for 256 new tokens) times this; 0.5 for 128 new tokens."""
    gated: bool
    """The paper's exact rule: all-or-nothing structure, each later level only if the one before
    it is nonzero. False: every part graded and counted on its own."""

    def __post_init__(self) -> None:
        for name in PARTS:
            weight = getattr(self, name)
            if not (math.isfinite(weight) and weight >= 0):
                raise ValueError(f"writing weight {name} must be finite and >= 0, got {weight!r}")
        if not (math.isfinite(self.length_scale) and self.length_scale > 0):
            raise ValueError(f"writing length_scale must be > 0, got {self.length_scale!r}")

    @property
    def max_total(self) -> float:
        return sum(getattr(self, name) for name in PARTS)


@dataclass(frozen=True)
class Band:
    """Full credit in [full_low, full_high], none outside (zero_low, zero_high), linear between."""

    zero_low: float
    full_low: float
    full_high: float
    zero_high: float

    def __call__(self, x: float) -> float:
        if self.full_low <= x <= self.full_high:
            return 1.0
        if self.zero_low < x < self.full_low:
            return (x - self.zero_low) / (self.full_low - self.zero_low)
        if self.full_high < x < self.zero_high:
            return (self.zero_high - x) / (self.zero_high - self.full_high)
        return 0.0

    def __str__(self) -> str:
        if math.isinf(self.full_high):
            return f">= {self.full_low:.1f}"
        return f"{self.full_low:.1f}-{self.full_high:.1f}"


@dataclass(frozen=True)
class KindSpec:
    """One task kind's constants (the paper's, see the module docstring; `target_words` ours)."""

    words: tuple[int, int]
    ratio: Band
    unique_ratio: Band
    transitions_in_both: bool
    jaccard_full: float
    target_words: tuple[int, int]
    """What the prompts ask of each part at scale 1 (ours: inside the bounds, ratio mid-band)."""

    def word_bounds(self, scale: float) -> tuple[int, int]:
        low = max(1, round(self.words[0] * scale))
        return low, max(low, round(self.words[1] * scale))

    def targets(self, scale: float) -> tuple[int, int]:
        return round(self.target_words[0] * scale), round(self.target_words[1] * scale)


INF = math.inf
SPECS = {
    "tldr": KindSpec(
        words=(8, 256),
        ratio=Band(1.1, 1.6, 3.2, 5.0),
        unique_ratio=Band(1.3, 2.0, INF, INF),
        transitions_in_both=False,
        jaccard_full=0.03,
        target_words=(40, 100),
    ),
    "arxiv": KindSpec(
        words=(128, 256),
        ratio=Band(0.8, 1.0, 1.3, 1.5),
        unique_ratio=Band(0.5, 0.7, 1.3, 1.7),
        transitions_in_both=True,
        jaccard_full=0.23,
        target_words=(150, 170),
    ),
}


def spec_for(kind: str) -> KindSpec:
    if kind not in SPECS:
        raise ValueError(f"unknown writing kind {kind!r}; known: {', '.join(SPECS)}")
    return SPECS[kind]


# ---------------------------------------------------------------------------- text measures
def word_count(text: str) -> int:
    """Whitespace tokens, as the paper counts them for its bounds."""
    return len(text.split())


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS}


def jaccard(a: str, b: str) -> float:
    """Overlap of the two texts' content words (0 when neither has any)."""
    sa, sb = content_words(a), content_words(b)
    union = sa | sb
    return len(sa & sb) / len(union) if union else 0.0


def _phrase_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(r"\s+".join(map(re.escape, p.split())) for p in phrases)
    return re.compile(rf"\b(?:{alternatives})\b")


_TRANSITION_PATTERNS = {cat: _phrase_pattern(ph) for cat, ph in TRANSITIONS.items()}


def transition_categories(text: str) -> tuple[str, ...]:
    """The transition categories with a word or phrase in `text` (whole words only)."""
    low = text.lower()
    return tuple(sorted(c for c, pat in _TRANSITION_PATTERNS.items() if pat.search(low)))


def transition_scale(n_categories: int) -> float:
    """The paper's scale: none 0; one category 0.4; +0.05 per further category; at most 1."""
    return 0.0 if n_categories == 0 else min(1.0, 0.4 + 0.05 * (n_categories - 1))


def bounds_score(n: int, low: int, high: int) -> float:
    """1 within [low, high]; n/low under it; 1 - (n - high)/high over it (0 at twice the bound)."""
    if n < low:
        return n / low
    if n > high:
        return max(0.0, 1.0 - (n - high) / high)
    return 1.0


def source_overlap(part: str, source_words: set[str]) -> float:
    """The share of the part's distinct content words that the source has (0 for none)."""
    own = content_words(part)
    return len(own & source_words) / len(own) if own else 0.0


# ---------------------------------------------------------------------------- the reward
@dataclass(frozen=True)
class WritingReward:
    """The parts (each in [0, 1], after the gates when gated), the total, and what they measured."""

    structure: float
    coordination: float
    vocabulary: float
    coherence: float
    grounding: float
    total: float
    words: tuple[int, int]
    word_bounds: tuple[int, int]
    length_ratio: float
    unique_ratio: float
    jaccard: float
    transitions: tuple[str, ...]
    source_overlap: float
    gate: str | None
    """The level where the paper's gates stopped (gated settings only), else None."""

    def parts(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in PARTS}

    def to_dict(self) -> dict[str, float]:
        return {"total": self.total, **self.parts()}


def level_reward(
    kind: str, source: str, first: str, second: str, settings: WritingSettings
) -> WritingReward:
    """The level reward of one joint action: part 1 `first` and part 2 `second` of `kind`."""
    spec = spec_for(kind)
    low, high = spec.word_bounds(settings.length_scale)
    n1, n2 = word_count(first), word_count(second)
    in_bounds = low <= n1 <= high and low <= n2 <= high
    if settings.gated:
        structure = float(in_bounds)
    else:
        structure = (bounds_score(n1, low, high) + bounds_score(n2, low, high)) / 2

    length_ratio = len(second) / len(first) if first else 0.0
    coordination = spec.ratio(length_ratio) if first else 0.0
    u1, u2 = len(set(words(first))), len(set(words(second)))
    unique_ratio = u2 / u1 if u1 else 0.0
    vocabulary = spec.unique_ratio(unique_ratio) if u1 else 0.0

    found = transition_categories(f"{first}\n{second}" if spec.transitions_in_both else second)
    overlap = jaccard(first, second)
    coherence = TRANSITION_WEIGHT * transition_scale(len(found)) + JACCARD_WEIGHT * min(
        overlap / spec.jaccard_full, 1.0
    )
    source_words = content_words(source)
    shares = [source_overlap(p, source_words) for p in (first, second)]
    on_source = sum(shares) / 2
    grounding = min(on_source / GROUNDING_FULL, 1.0)

    gate = None
    if settings.gated:  # the paper: stop at the first level that fails
        if not in_bounds:
            gate, coordination, vocabulary, coherence = "structure", 0.0, 0.0, 0.0
        elif coordination == 0:
            gate, vocabulary, coherence = "coordination", 0.0, 0.0
        elif vocabulary == 0:
            gate, coherence = "vocabulary", 0.0
    parts = {
        "structure": structure,
        "coordination": coordination,
        "vocabulary": vocabulary,
        "coherence": coherence,
        "grounding": grounding,
    }
    total = sum(getattr(settings, name) * value for name, value in parts.items())
    return WritingReward(
        **parts,
        total=total,
        words=(n1, n2),
        word_bounds=(low, high),
        length_ratio=length_ratio,
        unique_ratio=unique_ratio,
        jaccard=overlap,
        transitions=found,
        source_overlap=on_source,
        gate=gate,
    )


def reward_notes(kind: str, reward: WritingReward, settings: WritingSettings) -> str:
    """What went right and wrong, in words (the base of the feedback)."""
    spec = spec_for(kind)
    (n1, n2), (low, high) = reward.words, reward.word_bounds
    lines = [
        f"Length: part 1 has {n1} words, part 2 has {n2} (each should have {low}-{high}): "
        f"structure {reward.structure:.2f}."
    ]
    ratio_hint = ""
    if reward.length_ratio < spec.ratio.full_low:
        ratio_hint = " Part 2 should be longer compared with part 1."
    elif reward.length_ratio > spec.ratio.full_high:
        ratio_hint = " Part 2 should be shorter compared with part 1."
    lines.append(
        f"Length ratio part 2 / part 1: {reward.length_ratio:.2f} (best {spec.ratio}): "
        f"coordination {reward.coordination:.2f}.{ratio_hint}"
    )
    vocab_hint = ""
    if reward.unique_ratio < spec.unique_ratio.full_low:
        vocab_hint = " Part 2 needs more varied words."
    elif reward.unique_ratio > spec.unique_ratio.full_high:
        vocab_hint = " Part 2 has far more distinct words than part 1."
    lines.append(
        f"Distinct words part 2 / part 1: {reward.unique_ratio:.2f} (best {spec.unique_ratio}): "
        f"vocabulary {reward.vocabulary:.2f}.{vocab_hint}"
    )
    where = "the two parts" if spec.transitions_in_both else "part 2"
    found = ", ".join(c.replace("_", "/") for c in reward.transitions) or "none"
    lines.append(
        f"Transition words in {where}: {len(reward.transitions)} kinds ({found}); words shared "
        f"by the parts: Jaccard {reward.jaccard:.3f} (full at {spec.jaccard_full:g}): "
        f"coherence {reward.coherence:.2f}."
    )
    if settings.grounding > 0:
        lines.append(
            f"Words taken from the source: {reward.source_overlap:.0%} of the parts' content "
            f"words: grounding {reward.grounding:.2f}."
        )
    if reward.gate is not None:
        lines.append(f"The levels after {reward.gate} did not count: {reward.gate} failed.")
    return "\n".join(lines)
