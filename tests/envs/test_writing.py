"""The writing environment (orchestry/envs/writing): contract, views, cleaning, the corpus."""

import json
from pathlib import Path

import pytest
from conftest import DEFAULTS

from orchestry import paths
from orchestry.envs.base import Roles, Turn, check_env
from orchestry.envs.writing.env import WritingEnv
from orchestry.envs.writing.extract import clean_text, split_solo
from orchestry.envs.writing.reward import PARTS, WritingSettings
from orchestry.envs.writing.tasks import (
    DEFAULT_ROLES,
    SETS,
    WritingTask,
    load_set,
    task_from_dict,
    to_dict,
)

DATA = Path(__file__).resolve().parents[2] / paths.WRITING_DATA
SETTINGS = WritingSettings(**DEFAULTS.env.writing.model_dump())
ENV = WritingEnv(Roles.from_agents(DEFAULT_ROLES), SETTINGS)
FIRST, SECOND = DEFAULT_ROLES

TLDR_TEXTS = {  # raw completions for tldr/001 (the grocery money post), boilerplate included
    FIRST: "Sure! Here is a concise summary:\n\n**Summary**\nMy boyfriend keeps forgetting to pay "
    "his half of our groceries and now owes me over 400 dollars.",
    SECOND: "My boyfriend and I split groceries, but for three months he has not sent his weekly "
    "half and now owes me over 400 dollars. However, he is not broke: he just bought a gaming "
    "chair and concert tickets. When I raised it calmly, he called me petty, so I feel "
    "resentful. I wonder whether a joint account, separate food, or a bigger talk about money "
    "would work.\n\nLet me know if you need anything else!",
}
ARXIV_TEXTS = {  # for arxiv/001 (sparse replay buffers)
    FIRST: "Reinforcement learning agents on edge devices must keep adapting to changing "
    "environments, yet they run under strict memory limits. Experience replay is the standard "
    "defence against catastrophic forgetting; however, storing full transitions quickly exhausts "
    "the small memory of microcontrollers and low-power accelerators. As a result, lifelong "
    "learning on such hardware remains out of reach, and compact replay memories are needed.",
    SECOND: "We therefore propose SparseReplay, a replay buffer that stores transitions as "
    "compressed sparse codes learned jointly with the agent's encoder. Specifically, a "
    "lightweight decoder reconstructs approximate transitions on demand, while a novelty-weighted "
    "eviction policy keeps the buffer diverse across tasks. On twelve control tasks it retains "
    "91% of the performance of an uncompressed buffer with 14 times less memory. Moreover, a "
    "quadruped robot with 256 kilobytes of replay memory adapts to new terrains.",
}


def task(name: str) -> WritingTask:
    return load_set(name, DATA)[0]


@pytest.mark.parametrize("kind,texts", [("tldr", TLDR_TEXTS), ("arxiv", ARXIV_TEXTS)])
def test_the_env_passes_the_contract(kind, texts):
    good, empty = check_env(ENV, task(kind), texts)
    assert good.total > 2.0 and empty.total == 0.0
    assert set(good.metrics) >= {"reward/total", *(f"reward/{p}" for p in PARTS)}
    assert good.metrics["reward/total"] == good.total == good.record["reward"]["total"]
    assert set(good.record["reward"]) == {"total", *PARTS}
    assert good.record["kind"] == kind and not {"correct", "main_defined"} & set(good.record)
    first, second = (ENV.act(task(kind), a, texts[a]) for a in DEFAULT_ROLES)
    assert good.record["text"] == f"{first}\n\n{second}"
    json.dumps(good.record)


def test_two_roles_only():
    with pytest.raises(ValueError, match="got 3 agents"):
        WritingEnv(Roles.from_agents(["a", "b", "c"]), SETTINGS)


def test_act_strips_chat_boilerplate():
    text = ENV.act(task("tldr"), FIRST, TLDR_TEXTS[FIRST])
    assert text.startswith("My boyfriend") and "Summary" not in text and "Sure" not in text
    assert not ENV.act(task("tldr"), SECOND, TLDR_TEXTS[SECOND]).endswith("else!")
    assert clean_text('"Quoted answer."') == "Quoted answer."
    assert clean_text("# Title\nTL;DR: short text.\n\nI hope this helps!") == "short text."
    assert (
        clean_text("Here is why I left: my boss yelled.") == "Here is why I left: my boss yelled."
    )


def test_observations_say_the_job_and_grow_with_turns():
    t = task("tldr")
    first = ENV.observe(t, FIRST)
    assert [m["role"] for m in first] == ["system", "user"]
    assert t.source in first[1]["content"] and "about 20 words" in first[1]["content"]
    assert "about 50 words" in ENV.observe(t, SECOND)[1]["content"]
    outcome = ENV.score([(t, {a: ENV.act(t, a, x) for a, x in TLDR_TEXTS.items()})])[0]
    feedback = ENV.feedback(outcome, SECOND)
    assert "Part 1" in feedback and "Part 2" in feedback and "Revise your part, part 2" in feedback
    turns = [Turn("draft one", feedback), Turn("draft two", "again")]
    later = ENV.observe(t, SECOND, turns)
    assert len(later) == len(first) + 4 and later[-1] == {"role": "user", "content": "again"}
    assert ENV.feedback(outcome, FIRST, advice="Be brief.").endswith("Advice: Be brief.")


def test_the_baselines_views():
    t = task("arxiv")
    assert "two paragraphs" in ENV.solo_observe(t)[-1]["content"]
    after = ENV.observe_after_helpers(t, {FIRST: "Memory is scarce on edge devices."})
    assert after[:-1] == ENV.observe(t, SECOND)[:-1]
    assert after[-1]["content"].endswith("Memory is scarce on edge devices.\n\nWrite yours.")
    note = ENV.teammates_feedback({FIRST: "part one text", SECOND: "part two text"}, FIRST)
    assert "part two text" in note and "part one text" not in note
    assert ENV.reference(t, FIRST) is None


def test_a_lone_model_text_is_split_into_the_two_parts():
    two = "Paragraph 1: Short summary.\n\nParagraph 2: A longer summary. With two sentences."
    assert ENV.solo_act(task("tldr"), two) == {
        FIRST: "Short summary.",
        SECOND: "A longer summary. With two sentences.",
    }
    assert split_solo("One. Two. Three.") == ("One.", "Two. Three.")  # at the middle sentence
    assert split_solo("Line one.\nLine two.") == ("Line one.", "Line two.")
    assert split_solo("A lone sentence") == ("A lone sentence", "")
    assert split_solo("A.\n\nB.\n\nC.") == ("A.", "B.\n\nC.")


# ---------------------------------------------------------------------------- the corpus
@pytest.mark.parametrize("name,words", [("tldr", (120, 250)), ("arxiv", (120, 200))])
def test_the_sets(name, words):
    tasks = load_set(name, DATA)
    assert len(tasks) == 40 and len({t.id for t in tasks}) == 40
    assert all(t.kind == name and t.id.startswith(f"{name}/") and t.title for t in tasks)
    assert all(words[0] <= len(t.source.split()) <= words[1] for t in tasks)
    assert [task_from_dict(json.loads(json.dumps(to_dict(t)))) for t in tasks] == tasks


def test_bad_sets_and_rows_fail_loudly(tmp_path):
    assert SETS == ("tldr", "arxiv")
    with pytest.raises(ValueError, match="'poems'.*tldr, arxiv"):
        load_set("poems", DATA)
    (tmp_path / "tldr.yaml").write_text("- id: tldr/001\n  title: T\n  source: S\n- id: x\n")
    with pytest.raises(ValueError, match=r"tldr.yaml entry 1: expected keys"):
        load_set("tldr", tmp_path)
    (tmp_path / "tldr.yaml").write_text("- {id: arxiv/1, title: T, source: S}\n")
    with pytest.raises(ValueError, match="must be a string starting with 'tldr/'"):
        load_set("tldr", tmp_path)
    with pytest.raises(FileNotFoundError, match="arxiv.yaml"):
        load_set("arxiv", tmp_path)
    with pytest.raises(KeyError, match="missing keys"):
        task_from_dict({"id": "tldr/1", "kind": "tldr"})
    with pytest.raises(ValueError, match="kind 'poem'"):
        task_from_dict({"id": "p/1", "kind": "poem", "title": "T", "source": "S"})
