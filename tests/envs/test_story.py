"""The story environment (orchestry/envs/story): the contract, its data, its views and its judge."""

from __future__ import annotations

import json

import pytest
from conftest import DEFAULTS, ROOT

from orchestry.envs.base import Roles, Turn, check_env
from orchestry.envs.story.env import StoryEnv
from orchestry.envs.story.prose import clean_part
from orchestry.envs.story.reward import StorySettings
from orchestry.envs.story.tasks import (
    DEFAULT_ROLES,
    SETS,
    StoryTask,
    load_roles,
    load_set,
    task_from_dict,
    to_dict,
)

DATA = ROOT / "data" / "story"
_S = DEFAULTS.env.story  # the params defaults, the one home of these values
SETTINGS = StorySettings(
    _S.quality, _S.collaboration, _S.efficiency, tuple(_S.turns_range), tuple(_S.words_range)
)
TASKS = load_set("story", DATA)
TASK = TASKS[0]  # Mira and the lighthouse
TEXTS = {
    "writer": "Sure! Here is my part:\n\nMira kept the lighthouse on the rocky coast. Every night "
    "she lit the lamp for the fishing boats.",
    "editor": "One night the worst storm in years hit the lighthouse. The wind broke the lamp, "
    "and Mira saw a boat near the rocks.",
    "narrator": "## The End\nMira fixed the lamp and lit it again. The boat turned away from the "
    "rocks, and the fishermen thanked Mira. She smiled as the storm finally passed.\n\nLet me "
    "know if you want another ending!",
}


def make_env(agents=DEFAULT_ROLES, judge=None) -> StoryEnv:
    return StoryEnv(Roles.from_agents(agents), SETTINGS, load_roles(DATA), judge=judge)


@pytest.mark.parametrize("agents", [DEFAULT_ROLES, ("writer", "narrator")], ids=["3", "2"])
def test_the_contract(agents):
    texts = {a: TEXTS[a] for a in agents}
    outcomes = check_env(make_env(agents), TASK, texts)
    good, empty = outcomes
    assert good.total > empty.total == 0.0
    for out in outcomes:
        assert set(out.metrics) >= {
            "reward/total",
            "reward/quality",
            "reward/collaboration",
            "reward/efficiency",
        }
        assert out.record["reward"]["total"] == out.total == out.metrics["reward/total"]
        assert out.record["judge"] == "offline"
        assert not {"correct", "main_defined"} & set(out.record)


def test_a_good_joint_action_earns_the_whole_reward():
    env = make_env()
    actions = {a: env.act(TASK, a, t) for a, t in TEXTS.items()}
    [out] = env.score([(TASK, actions)])
    assert out.total == pytest.approx(1.0), out.notes
    assert out.record["text"] == "\n\n".join(actions.values())
    assert out.notes == "3 paragraphs, 68 words. No problems found."


def test_act_keeps_the_prose_only():
    assert clean_part(TEXTS["writer"]).startswith("Mira kept")
    narrator = clean_part(TEXTS["narrator"])
    assert narrator.startswith("Mira fixed") and narrator.endswith("finally passed.")
    assert clean_part('"Mira ran."') == "Mira ran."
    poet_team = make_env(("writer", "poet"))
    assert poet_team.act(TASK, "poet", "**Poet:** Mira saw the sea.\nNote: short.") == (
        "Mira saw the sea."
    )
    assert clean_part("Title: Storm\n**Editor:** Great waves rose.\nMira   ran.") == (
        "Great waves rose. Mira ran."
    )


def test_roles_come_from_the_agents_and_unknown_roles_are_named():
    env = make_env(("poet", "writer", "critic", "narrator"))
    system = env.observe(TASK, "critic")[0]["content"]
    assert load_roles(DATA)["critic"] in system
    assert "3. critic (you)" in env.observe(TASK, "critic")[1]["content"]
    with pytest.raises(ValueError, match=r"\['bard'\] have no duty.*writer, editor, narrator"):
        make_env(("writer", "bard"))


def test_the_roles_file_has_the_default_team_and_spares():
    roles = load_roles(DATA)
    assert set(DEFAULT_ROLES) < set(roles) and len(roles) >= 5


def test_the_task_set_round_trips():
    assert SETS == ("story",) and len(TASKS) == 40
    assert TASKS[0].id == "story/001" and len({t.id for t in TASKS}) == 40
    for task in TASKS:
        row = json.loads(json.dumps(to_dict(task)))
        assert task_from_dict(row) == task
    with pytest.raises(ValueError, match="unknown story set 'stories'"):
        load_set("stories", DATA)


def test_bad_task_entries_are_named(tmp_path):
    (tmp_path / "themes.yaml").write_text(
        "- {id: story/001, theme: T, protagonist: Mira, setting: S}\n"
        "- {id: story/002, theme: T, protagonist: the captain, setting: S}\n"
    )
    with pytest.raises(ValueError, match=r"themes.yaml entry 2: protagonist 'the captain'"):
        load_set("story", tmp_path)
    with pytest.raises(ValueError, match="missing \\['setting'\\]"):
        task_from_dict({"id": "x", "theme": "t", "protagonist": "Mira"})


def test_solo_act_cuts_the_lone_story_into_one_part_per_role():
    env = make_env()
    by_paragraphs = "\n\n".join(clean_part(t) for t in TEXTS.values()) + "\n\nMira slept."
    parts = env.solo_act(TASK, by_paragraphs)
    assert list(parts) == list(DEFAULT_ROLES) and all(parts.values())
    assert "\n\n".join(parts.values()) == by_paragraphs

    one_paragraph = " ".join(clean_part(t) for t in TEXTS.values())
    parts = env.solo_act(TASK, f"Here is the story:\n{one_paragraph}")
    assert all(parts.values())
    assert " ".join(parts.values()) == one_paragraph  # the same text, cut at sentence ends
    assert env.solo_observe(TASK)[-1]["role"] == "user"


def test_later_turns_grow_the_observation_and_show_the_whole_story():
    env = make_env()
    actions = {a: env.act(TASK, a, t) for a, t in TEXTS.items()}
    actions["narrator"] = ""
    [out] = env.score([(TASK, actions)])
    feedback = env.feedback(out, "narrator", advice="End with the boat safe.")
    for part in (actions["writer"], actions["editor"], "Narrator: (empty)"):
        assert part in feedback
    assert "The narrator's part is empty" in feedback and "Advice: End with" in feedback

    first = env.observe(TASK, "narrator")
    second = env.observe(TASK, "narrator", [Turn("", feedback)])
    third = env.observe(TASK, "narrator", [Turn("", feedback), Turn("Mira slept.", "again")])
    assert len(first) < len(second) < len(third)
    assert third[: len(second)] == second and third[-2:] == [
        {"role": "assistant", "content": "Mira slept."},
        {"role": "user", "content": "again"},
    ]


def test_the_baseline_views_show_the_teammates_parts():
    env = make_env()
    helpers = {"writer": "Mira kept the light.", "editor": "A storm came."}
    last = env.observe_after_helpers(TASK, helpers)[-1]["content"]
    assert "Writer: Mira kept the light." in last and "Editor: A storm came." in last
    message = env.teammates_feedback({**helpers, "narrator": "Mira won."}, "editor")
    assert "Mira kept the light." in message and "A storm came." not in message


def test_the_judge_callable_scores_quality_and_none_falls_back_offline():
    calls: list[str] = []

    def judge(task: StoryTask, story: str) -> float | None:
        calls.append(story)
        return None if "worst storm" in story else 0.25

    env = make_env(judge=judge)
    offline = make_env()
    actions = {a: env.act(TASK, a, t) for a, t in TEXTS.items()}
    calm = {**actions, "editor": "A boat came near the rocks at night, and Mira was afraid."}
    batch = [(TASK, actions), (TASK, calm), (TASK, {a: "" for a in DEFAULT_ROLES})]
    fell_back, judged, empty = env.score(batch)

    assert len(calls) == 2  # once per story; the empty one is not sent
    assert fell_back.record["judge"] == "offline"
    assert fell_back.total == offline.score(batch[:1])[0].total
    assert judged.record["judge"] == "claude" and judged.record["reward"]["quality"] == 0.25
    assert empty.record["judge"] == "offline" and empty.total == 0.0

    with pytest.raises(ValueError, match="not in \\[0, 1\\]"):
        make_env(judge=lambda task, story: 1.5).score(batch[:1])
