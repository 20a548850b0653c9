"""The writing level reward (envs/writing/reward.py) on hand-computed and hand-written pairs."""

from dataclasses import replace

import pytest
from conftest import DEFAULTS

from orchestry.envs.writing.reward import (
    SPECS,
    WritingSettings,
    bounds_score,
    content_words,
    jaccard,
    level_reward,
    source_overlap,
    transition_categories,
    transition_scale,
)

# the params defaults: the paper's weights (max 3.0), graded parts, bounds for 128 new tokens
SETTINGS = WritingSettings(**DEFAULTS.env.writing.model_dump())

POST = (
    "My roommate's girlfriend stays over almost every night, showers when I need to get ready, "
    "leaves dishes, and our heating and electricity bills went up. She does not pay rent. When I "
    "mentioned the bills, my roommate got awkward and said she is just visiting a lot. Our lease "
    "limits guests to fourteen nights a month. I want to keep the friendship and avoid a fight."
)
GOOD = (
    "My roommate's girlfriend practically lives with us but pays nothing toward rent or bills, and "
    "my roommate dodges the topic.",
    "My roommate's girlfriend stays over nearly every night, so the bills went up while she pays "
    "nothing toward rent. However, when I mentioned the higher heating and electricity costs, my "
    "roommate got awkward and insisted she is only visiting. For example, she showers when I need "
    "to get ready and leaves dirty dishes, although our lease limits guests to fourteen nights.",
)


def reward(first: str, second: str, kind: str = "tldr", settings=SETTINGS, source=POST):
    return level_reward(kind, source, first, second, settings)


# ---------------------------------------------------------------------------- parts by hand
def test_bands_are_the_papers():
    tldr, arxiv = SPECS["tldr"], SPECS["arxiv"]
    # length ratio: TL;DR full in 1.6-3.2, linear to 0 at 1.1 and 5.0
    assert tldr.ratio(2.0) == 1.0 and tldr.ratio(1.6) == 1.0 and tldr.ratio(3.2) == 1.0
    assert tldr.ratio(1.35) == pytest.approx(0.5) and tldr.ratio(4.1) == pytest.approx(0.5)
    assert tldr.ratio(1.0) == 0.0 and tldr.ratio(6.0) == 0.0
    # arXiv: full in 1.0-1.3, linear to 0 at 0.8 and 1.5
    assert arxiv.ratio(0.9) == pytest.approx(0.5) and arxiv.ratio(1.4) == pytest.approx(0.5)
    assert arxiv.ratio(1.6) == 0.0
    # unique-word ratio: TL;DR full from 2.0, 0 under 1.3; arXiv full in 0.7-1.3
    assert tldr.unique_ratio(9.0) == 1.0 and tldr.unique_ratio(1.65) == pytest.approx(0.5)
    assert tldr.unique_ratio(1.2) == 0.0
    assert arxiv.unique_ratio(0.6) == pytest.approx(0.5)
    assert arxiv.unique_ratio(1.5) == pytest.approx(0.5)
    # word bounds: the paper's 8-256 / 128-256, scaled
    assert tldr.word_bounds(1.0) == (8, 256) and tldr.word_bounds(0.5) == (4, 128)
    assert arxiv.word_bounds(1.0) == (128, 256) and arxiv.word_bounds(0.5) == (64, 128)


def test_structure_is_graded_around_the_bounds():
    assert bounds_score(50, 4, 128) == 1.0
    assert bounds_score(2, 4, 128) == 0.5  # n / low
    assert bounds_score(192, 4, 128) == 0.5  # 1 - (n - high) / high
    assert bounds_score(256, 4, 128) == 0.0 and bounds_score(0, 4, 128) == 0.0


def test_transitions_count_categories_of_whole_words():
    assert transition_scale(0) == 0.0
    assert transition_scale(1) == pytest.approx(0.4)
    assert transition_scale(3) == pytest.approx(0.5)
    assert transition_scale(20) == 1.0
    assert transition_categories("However, the cat was fine.") == ("concession", "contrast")
    # the paper matched substrings: "as" in "was", "if" in "different", "so" in "also"... no more
    assert transition_categories("A different cat was sitting there.") == ()
    assert transition_categories("For   example, it rained.") == ("examples",)


def test_jaccard_and_grounding_use_content_words():
    assert jaccard("red apples taste sweet", "green apples taste sour") == pytest.approx(2 / 6)
    assert jaccard("the cat", "the dog") == 0.0  # "the" is a stopword
    assert jaccard("", "") == 0.0  # the paper said 1.0: free reward without its gates
    source = content_words("The red apples of the orchard")
    assert source_overlap("red apples and green pears", source) == pytest.approx(2 / 4)
    assert source_overlap("", source) == 0.0


def test_a_small_pair_by_hand():
    first = "Cats sleep all day."  # 4 words (the scaled lower bound), 19 characters
    second = "However, cats sleep all day because they hunt at night."  # 10 words, 55 chars
    r = reward(first, second, source="My cats sleep all day and hunt at night.")
    assert r.words == (4, 10) and r.word_bounds == (4, 128)
    assert r.structure == 1.0
    assert r.length_ratio == pytest.approx(55 / 19) and r.coordination == 1.0  # in 1.6-3.2
    assert r.unique_ratio == pytest.approx(10 / 4) and r.vocabulary == 1.0  # >= 2.0
    # "however": contrast + concession = 0.45; content-word Jaccard 3/7 >= 0.03: full
    assert r.transitions == ("concession", "contrast")
    assert r.jaccard == pytest.approx(3 / 7)
    assert r.coherence == pytest.approx(0.4 * 0.45 + 0.6 * 1.0)
    # part 1: 3/3 content words from the source, part 2: 5/7; mean 6/7 >= 0.5: full
    assert r.source_overlap == pytest.approx(6 / 7) and r.grounding == 1.0
    assert r.total == pytest.approx(0.5 + 1.0 + 0.5 + 0.78)
    assert r.to_dict()["total"] == r.total and r.gate is None


def test_the_gated_rule_is_the_papers():
    gated = replace(SETTINGS, gated=True)
    # a part outside the bounds: the paper gives 0 and stops
    short = reward("Cats.", GOOD[1], settings=gated)
    assert short.gate == "structure" and short.total == 0.0
    assert reward("Cats.", GOOD[1]).total > 0  # graded: partial credit
    # within bounds but the ratio outside its band: structure only
    flat = reward(GOOD[1], GOOD[1], settings=gated)
    assert flat.gate == "coordination" and flat.total == pytest.approx(0.5)
    assert reward(*GOOD, settings=gated).gate is None


def test_settings_are_checked():
    with pytest.raises(ValueError, match="coherence"):
        replace(SETTINGS, coherence=-1.0)
    with pytest.raises(ValueError, match="length_scale"):
        replace(SETTINGS, length_scale=0.0)
    assert SETTINGS.max_total == 3.0
    with pytest.raises(ValueError, match="unknown writing kind"):
        level_reward("poem", "", "a", "b", SETTINGS)


# ---------------------------------------------------------------------------- hand-written pairs
def test_the_good_pair_scores_high_on_every_part():
    r = reward(*GOOD)
    assert r.structure == 1.0 and r.coordination == 1.0 and r.vocabulary == 1.0
    assert r.coherence > 0.8 and r.total > 2.8


@pytest.mark.parametrize(
    "first,second",
    [
        pytest.param(GOOD[0], GOOD[0], id="wrong-length-ratio"),
        pytest.param(GOOD[1], GOOD[0], id="swapped-parts"),
        pytest.param(
            "Roommate's girlfriend stays over and does not pay.",
            "Roommate's girlfriend stays over and does not pay. " * 5,
            id="repetitive",
        ),
        pytest.param(
            GOOD[0],
            "A houseguest who uses the shower, the kitchen and the heating every evening and never "
            "contributes money creates tension. Shared leases exist to protect each tenant, "
            "because costs grow with every extra person. Honest talks about money keep "
            "friendships healthy.",
            id="no-transitions-no-overlap",
        ),
        pytest.param(
            "Sure! Here is a concise summary of the post:",
            "I hope this helps! Let me know if you would like me to change anything else.",
            id="chat-boilerplate",
        ),
    ],
)
def test_the_good_pair_beats_a_flawed_one(first, second):
    assert reward(*GOOD).total > reward(first, second).total + 0.3


def test_flaws_show_in_their_own_part():
    good = reward(*GOOD)
    assert reward(GOOD[0], GOOD[0]).coordination == 0.0  # ratio 1.0 < 1.1
    repetitive = reward("Girlfriend stays and does not pay.", "Girlfriend stays. " * 12)
    assert repetitive.vocabulary == 0.0 < good.vocabulary
    unlinked = reward(GOOD[0], "Shared leases protect each tenant. Honest talks keep peace.")
    assert unlinked.transitions == () and unlinked.jaccard == 0.0 and unlinked.coherence == 0.0


ABSTRACT = (
    "Serverless platforms schedule short functions for latency and cost but ignore energy. We "
    "present GreenLambda, a scheduler that profiles functions online and places each invocation "
    "on the most energy-efficient processor that meets its latency objective, reducing cluster "
    "energy by 29% with latency within 5% of a latency-optimal baseline."
)
BACKGROUND = (
    "Serverless computing lets developers run short functions on demand without managing servers, "
    "and its schedulers have therefore been tuned for latency and cost. However, data centers "
    "consume a growing share of the world's electricity, and clusters increasingly mix "
    "high-performance and low-power processors. Placing each function on the right processor could "
    "save substantial energy, yet doing so requires knowing how every function behaves on every "
    "processor type, which current platforms do not measure."
)
METHOD = (
    "We present GreenLambda, a serverless scheduler that treats energy as a first-class objective. "
    "Specifically, it profiles functions online with lightweight sampling and predicts their "
    "energy and latency on each processor class. A constrained optimization then places every "
    "invocation on the most energy-efficient node that still meets its latency objective. As a "
    "result, on production traces GreenLambda reduces cluster energy by 29% while keeping tail "
    "latency within 5% of a latency-optimal baseline, with profiling overhead below 2%."
)


def test_arxiv_pairs():
    good = reward(BACKGROUND, METHOD, kind="arxiv", source=ABSTRACT)
    assert good.structure == 1.0 and good.coordination == 1.0 and good.vocabulary == 1.0
    short_method = reward(BACKGROUND, METHOD[:150], kind="arxiv", source=ABSTRACT)
    assert short_method.coordination == 0.0 and short_method.total < good.total - 1.0
    # transitions count in both parts for arXiv (part 1 alone has "however", "therefore"...)
    plain = "Energy matters. Serverless platforms ignore energy. " * 8
    assert reward(BACKGROUND, plain, kind="arxiv", source=ABSTRACT).transitions
