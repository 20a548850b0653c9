"""The story reward's measured parts (orchestry/envs/story/judge.py, reward.py) on hand-written
stories: the offline judge must rank every good story above every bad one, collaboration must
prefer a transcript that carries the story forward, efficiency must follow its range."""

from __future__ import annotations

import pytest

from orchestry.envs.story.judge import judge_quality
from orchestry.envs.story.reward import StorySettings, collaboration, efficiency
from orchestry.envs.story.tasks import StoryTask

TASK = StoryTask(
    id="story/001",
    theme="A lighthouse keeper must keep the light burning through the worst storm in years.",
    protagonist="Mira",
    setting="a lighthouse on a rocky coast",
)

GOOD = {
    "classic": (
        "Mira had kept the lighthouse on the rocky coast for ten years. Every night she climbed "
        "the tall stairs and lit the great lamp for the fishing boats.\n\n"
        "One evening the worst storm in years rolled in from the sea. The wind broke a window at "
        "the top of the lighthouse, and the rain put out the lamp. Mira heard a boat horn "
        "somewhere in the dark waves.\n\n"
        "She covered the broken window with her coat and lit the lamp again with her last match. "
        "The beam swept over the waves, and the boat turned away from the rocks. At dawn the "
        "fishermen came to thank Mira, and she smiled as the storm finally passed."
    ),
    "two_parts": (
        "Mira lived alone in the white lighthouse above the rocky coast, and she loved the quiet "
        "nights when the lamp turned slowly over the water.\n\n"
        "But one night a terrible storm came, and the lamp began to flicker. Mira carried oil up "
        "the stairs through the howling wind and kept the light burning until morning. When the "
        "storm was over, three ships sailed safely into the harbor, and Mira finally slept."
    ),
    "dialogue": (
        'The lighthouse stood on the rocky coast, and Mira was its keeper. "No ship will '
        'crash while I keep this light," she told her cat.\n\n'
        "That night the storm was the worst in years. Suddenly the old lamp went dark, and Mira "
        "was afraid, because a small ship was sailing toward the rocks.\n\n"
        "Mira found a lantern, climbed to the top of the lighthouse and held the light high in "
        "the storm. The ship saw it and turned. In the end the captain hugged Mira, and she "
        "laughed with relief."
    ),
    "four_parts": (
        "On a rocky coast, Mira tended an old lighthouse with a brass lamp.\n\n"
        "Winter brought a storm so strong that the lighthouse shook. Mira held the rail as the "
        "lamp swung and the glass cracked.\n\n"
        "Mira wrapped the cracked lamp in cloth and wire so the light kept burning. Out on the "
        "dark sea, a fishing boat followed the lighthouse beam.\n\n"
        "At last the storm faded. The boat reached the harbor, and Mira watched the sunrise "
        "from the lighthouse, proud and safe."
    ),
}

BAD = {
    "repetitive": (
        "Mira lived in the lighthouse. Mira lived in the lighthouse. The storm came to the "
        "lighthouse and the storm came to the lighthouse.\n\n"
        "The storm came to the lighthouse and the storm came to the lighthouse. Mira lived in "
        "the lighthouse. Mira lived in the lighthouse.\n\n"
        "The storm came to the lighthouse and Mira lived in the lighthouse. Mira lived in the "
        "lighthouse."
    ),
    "no_ending": (
        "Mira kept the lighthouse on the rocky coast. Every night she lit the lamp for the "
        "boats out on the water.\n\n"
        "Then the worst storm in years arrived. The wind broke the windows and the lamp went "
        "dark, and a boat was heading for the rocks.\n\n"
        "Mira ran up the stairs of the lighthouse. The boat came closer and closer to the rocks "
        "while the wind and rain beat against the walls."
    ),
    "different_protagonists": (
        "Mira kept a lighthouse on the rocky coast and lit its lamp every evening.\n\n"
        "Tom worked in an office in a busy city. He drank coffee and answered emails all day "
        "long.\n\n"
        "Zara piloted a spaceship to a distant planet. The aliens there gave her a golden "
        "crown, and she flew home happy."
    ),
    "too_short": "Mira kept the light on. The end.",
    "too_long": "\n\n".join(
        [GOOD["classic"]]
        + [
            f"Mira also remembered {thing} from long ago, when she was a little girl and her "
            f"grandmother kept the lighthouse, telling stories about {other} and the sea."
            for thing, other in [
                ("the gulls", "sailors"),
                ("the red boat", "mermaids"),
                ("the winter", "whales"),
                ("the bell", "pirates"),
                ("the fog", "lost ships"),
                ("the garden", "old kings"),
                ("the school", "the moon"),
                ("the market", "storms"),
                ("the songs", "islands"),
                ("the harbor", "stars"),
                ("the nets", "giants"),
                ("the candles", "ghosts"),
                ("the rope", "seals"),
                ("the cliffs", "treasure"),
                ("the fires", "dragons"),
                ("the kites", "winds"),
            ]
        ]
    ),
    "boilerplate": (
        "Sure! Here is the story you asked for:\n\n"
        "Title: The Lighthouse\n\n"
        "Mira kept the lighthouse on the rocky coast. One night a storm broke the lamp, but "
        "she fixed it and the boats were safe.\n\n"
        "As an AI language model, I hope you enjoyed this story. Let me know if you want "
        "changes!"
    ),
}
WORDS_RANGE = (60, 300)


def quality(story: str) -> float:
    return judge_quality(TASK, story, WORDS_RANGE).score


def test_every_good_story_scores_above_every_bad_one():
    good = {name: quality(story) for name, story in GOOD.items()}
    bad = {name: quality(story) for name, story in BAD.items()}
    worst_good = min(good, key=good.get)
    best_bad = max(bad, key=bad.get)
    assert good[worst_good] > bad[best_bad], (good, bad)
    assert all(0.0 <= s <= 1.0 for s in [*good.values(), *bad.values()])


@pytest.mark.parametrize(
    ("name", "check", "issue"),
    [
        ("repetitive", "repetition", "repeats"),
        ("no_ending", "arc", "does not end the story"),
        ("different_protagonists", "coherence", "is about Tom, not the protagonist"),
        ("too_short", "length", "under the range"),
        ("too_long", "length", "over the range"),
        ("boilerplate", "meta", "chat text"),
    ],
)
def test_each_bad_story_loses_on_its_own_fault(name, check, issue):
    report = judge_quality(TASK, BAD[name], WORDS_RANGE)
    assert report.checks()[check] < 1.0
    assert any(issue in text for text in (*report.issues, *report.coherence_issues))


def test_an_empty_story_scores_zero():
    report = judge_quality(TASK, "", WORDS_RANGE)
    assert report.score == 0.0 and report.issues == ("the story is empty",)


def test_a_story_cut_mid_sentence_loses_its_ending():
    whole = judge_quality(TASK, GOOD["classic"], WORDS_RANGE)
    cut = judge_quality(TASK, GOOD["classic"].removesuffix(" finally passed."), WORDS_RANGE)
    assert cut.arc < whole.arc and "the story stops mid-sentence" in cut.issues


OPENING = (
    "writer",
    "Mira kept the lighthouse on the rocky coast. Every night she lit the lamp for the boats.",
)
CARRIED = [
    OPENING,
    (
        "editor",
        "One night a storm broke the lamp of the lighthouse, and Mira saw the boats "
        "drifting toward the rocks.",
    ),
    (
        "narrator",
        "Mira fixed the lamp and lit it again. The boats saw the light and turned "
        "away from the rocks, and Mira finally smiled.",
    ),
]


def test_collaboration_prefers_carrying_the_story_forward_over_restarting():
    carried, carried_issues = collaboration(TASK, CARRIED)
    restarted, restart_issues = collaboration(
        TASK,
        [
            OPENING,
            ("editor", "Once upon a time, there was a girl named Mira who lived by the sea."),
            ("narrator", "Once upon a time there was a lighthouse. It was very tall."),
        ],
    )
    assert carried == 1.0 and carried_issues == []
    assert restarted < 0.5
    assert any("starts the story over ('Once upon a time'" in i for i in restart_issues)


@pytest.mark.parametrize(
    ("later", "issue"),
    [
        ("Tom worked in an office. He drank coffee all day.", "puts Tom in place of"),
        ("Mira flew her spaceship to a distant planet in the galaxy.", "moves the story to space"),
        ("", None),
    ],
)
def test_a_contradicting_or_empty_part_weakens_its_link(later, issue):
    score, issues = collaboration(TASK, [*CARRIED[:2], ("narrator", later)])
    assert score < collaboration(TASK, CARRIED)[0]
    if issue:
        assert any(issue in i for i in issues), issues
    else:
        assert score == 0.5  # the editor's full link, and 0 for the empty part


def test_collaboration_needs_the_protagonist_kept():
    dropped = [*CARRIED[:2], ("narrator", "The keeper fixed the lamp and the boats turned away.")]
    score, issues = collaboration(TASK, dropped)
    assert 0.5 < score < 1.0
    assert "the protagonist Mira is missing from the narrator's part" in issues


def _parts(*paragraph_counts: int) -> list[tuple[str, str]]:
    return [
        (f"role{i}", "\n\n".join("Mira sailed home." for _ in range(n)))
        for i, n in enumerate(paragraph_counts)
    ]


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((1, 1, 1), 1.0),  # at the lower bound
        ((2, 2, 2), 1.0),  # at the upper bound
        ((1, 1), 1.0),  # under the range: no penalty (a bonus, as the first form had)
        ((3, 2, 2), 0.75),  # one over
        ((3, 3, 3), 0.25),  # three over
        ((5, 5, 5), 0.0),  # floor
        ((1, 0, 1), 0.0),  # a role wrote nothing
    ],
)
def test_efficiency_against_the_range(counts, expected):
    value, n, issues = efficiency(_parts(*counts), (3, 6))
    assert value == pytest.approx(expected)
    assert n == sum(counts)
    assert bool(issues) == (expected < 1.0)


def test_settings_are_checked():
    with pytest.raises(ValueError, match="weights"):
        StorySettings(-0.1, 0.5, 0.5, (3, 6), (60, 300))
    with pytest.raises(ValueError, match="turns_range"):
        StorySettings(0.4, 0.4, 0.2, (6, 3), (60, 300))
    settings = StorySettings(0.4, 0.4, 0.2, [3, 6], [60, 300])  # as params gives them
    assert settings.turns_range == (3, 6) and settings.words_range == (60, 300)
    assert settings.total(1.0, 0.5, 0.0) == pytest.approx(0.6)
