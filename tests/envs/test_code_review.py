"""The code-review workflow (writer -> reviewer -> refactorer) on a coop problem, real sandbox."""

import json

import pytest
from conftest import ROOT, limits

from orchestry.envs.base import Roles, Turn, check_env
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.code_review.env import CodeReviewEnv
from orchestry.envs.code_review.extract import clean_review
from orchestry.envs.code_review.reward import (
    CodeReviewSettings,
    defines_entry_point,
    review_quality,
)

AGENTS = ["writer", "reviewer", "refactorer"]
SETTINGS = CodeReviewSettings(
    tests_weight=1.0, syntax_weight=0.5, review_weight=0.5, review_max_words=60
)
TASK = load_problem_dir(ROOT / "data/coop")[0]  # coop/acronym: 6 tests

# splits at spaces only and takes the first character: fails the hyphen, "123 go" and "(very)" tests
BUGGY = """def acronym(phrase: str) -> str:
    return "".join(word[0].upper() for word in phrase.split())
"""
REVIEW = (
    "The draft splits only at spaces, so hyphenated words lose their letter, and it takes the "
    "first character even when it is not a letter (123 go gives 1G). Split at hyphens too and "
    "skip leading non-letters."
)
# fixes none of the draft's failures and breaks two of its passes (only the "" test passes)
BREAKING = """def acronym(phrase: str) -> str:
    return ""
"""


@pytest.fixture(scope="module")
def env() -> CodeReviewEnv:
    return CodeReviewEnv(Roles.from_agents(AGENTS), SETTINGS, limits(), workers=2)


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}\n```\n"


def _score(env, draft, review, final):
    return env.score([(TASK, {"writer": draft, "reviewer": review, "refactorer": final})])[0]


def test_the_workflow_passes_the_contract(env):
    texts = {
        "writer": _fenced(BUGGY),
        "reviewer": f"Sure! Here is my review:\n{REVIEW}",
        "refactorer": _fenced(TASK.reference_program()),
    }
    fixed, empty = check_env(env, TASK, texts)
    assert fixed.total > empty.total == 0.0
    assert fixed.record["final_from"] == "refactorer" and fixed.record["final_pass_rate"] == 1.0
    assert fixed.record["draft_pass_rate"] == 0.5 and fixed.record["improved"] is True
    assert fixed.record["reward"] == {"total": 2.0, "tests": 1.0, "syntax": 1.0, "review": 1.0}
    assert set(fixed.metrics) >= {
        "reward/total",
        "reward/tests",
        "reward/syntax",
        "reward/review",
        "draft_pass_rate",
        "final_pass_rate",
        "improved_rate",
    }
    for out in (fixed, empty):
        assert not {"correct", "main_defined", "helper_names"} & set(out.record)
        assert out.total == out.record["reward"]["total"] == out.metrics["reward/total"]
        json.dumps(out.record)
    assert "Split at hyphens" in fixed.record["text"] and "def acronym" in fixed.record["text"]
    assert "fixed 3 of the draft's 3 failing tests" in fixed.notes
    assert empty.record["first_failure"] == "no function `acronym` was defined"


def test_a_fix_earns_the_review_and_a_regression_does_not(env):
    fixed = _score(env, BUGGY, REVIEW, TASK.reference_program())
    broken = _score(env, BUGGY, REVIEW, BREAKING)
    assert fixed.record["reward"]["review"] == 1.0
    assert broken.record["reward"]["review"] == 0.0 and broken.record["broken"] == 2
    assert broken.total < fixed.total and "broke 2" in broken.notes


def test_an_empty_review_earns_nothing_even_when_the_final_is_right(env):
    out = _score(env, BUGGY, "", TASK.reference_program())
    assert out.record["reward"]["review"] == 0.0 and out.record["reward"]["tests"] == 1.0
    assert "Review (reviewer): empty." in out.notes


def test_without_the_refactorers_code_the_draft_stands(env):
    for final in ("", "def acronym(phrase):\n    pass\n"):  # nothing, or a stub
        out = _score(env, BUGGY, REVIEW, final)
        assert out.record["final_from"] == "writer" and out.record["final"] == BUGGY
        assert out.record["final_pass_rate"] == out.record["draft_pass_rate"] == 0.5
        assert out.record["reward"]["review"] == 0.0 and out.record["improved"] is False
        assert "the draft stands" in out.notes and "draft stands" in out.record["text"]


def test_a_correct_draft_kept_correct_earns_the_review(env):
    ref = TASK.reference_program()
    kept = _score(env, ref, "Looks correct; the hyphen and digit cases are handled.", "")
    assert kept.record["reward"] == {"total": 2.0, "tests": 1.0, "syntax": 1.0, "review": 1.0}
    assert "still passes them all" in kept.notes


def test_review_quality_on_hand_made_results():
    t, f = True, False
    assert review_quality((t, f, f, t), (t, t, t, t), "bug") == 1.0
    assert review_quality((t, f, f, t), (t, t, f, t), "bug") == 0.5
    assert review_quality((t, f, f, t), (f, t, f, t), "bug") == 0.0  # one fixed, one broken
    assert review_quality((t, f, f, t), (f, f, f, f), "bug") == 0.0  # floored at 0
    assert review_quality((t, t), (t, t), "fine") == 1.0
    assert review_quality((t, t), (t, f), "fine") == 0.0
    assert review_quality((f, f), (t, t), "  ") == 0.0
    with pytest.raises(ValueError, match="2 test results but the final has 1"):
        review_quality((t, t), (t,), "x")


def test_the_team_needs_exactly_three_roles():
    for agents in (["a", "b"], ["a", "b", "c", "d"]):
        with pytest.raises(ValueError, match=f"three roles.*got {len(agents)} agents"):
            CodeReviewEnv(Roles.from_agents(agents), SETTINGS, limits(), workers=1)


def test_roles_go_by_position_and_see_the_earlier_actions(env):
    renamed = CodeReviewEnv(Roles.from_agents(["ann", "bo", "cy"]), SETTINGS, limits(), 1)
    first = renamed.observe(TASK, "bo")[-1]["content"]
    assert "Review the writer's draft of `acronym`" in first and "at most 60 words" in first
    assert "def aux(word: str) -> str:" in first  # the coop helper's signature is shown
    assert "return ch.upper()" not in first  # never its reference
    seen = renamed.observe_after(TASK, "cy", {"ann": BUGGY, "bo": REVIEW})[-1]["content"]
    assert BUGGY.strip() in seen and REVIEW in seen and "final function" in seen
    assert renamed.observe_after(TASK, "ann", {}) == renamed.observe(TASK, "ann")
    with pytest.raises(ValueError, match="unknown agent 'dan'"):
        renamed.observe(TASK, "dan")


def test_actions_code_for_the_coders_and_prose_for_the_reviewer(env):
    text = _fenced(BUGGY) + "\nprint(acronym('a b'))\n"
    assert env.act(TASK, "writer", text) == env.act(TASK, "refactorer", text)
    assert defines_entry_point(env.act(TASK, "writer", text), "acronym")
    review = env.act(
        TASK, "reviewer", f"## Review\n{REVIEW}\n```python\n{BUGGY}```\nHope this helps!"
    )
    assert review == REVIEW
    assert clean_review("one two three four", 3) == "one two three"
    assert clean_review("- a bug\n\n\n- an edge case", 10) == "- a bug\n\n- an edge case"


def test_references(env):
    for agent in ("writer", "refactorer"):
        ref = env.reference(TASK, agent)
        assert ref is not None and "def aux(" in ref and "def acronym(" in ref
    assert env.reference(TASK, "reviewer") is None


def test_observations_grow_with_history(env):
    turns = [Turn("draft one", "feedback one"), Turn("draft two", "feedback two")]
    for agent in AGENTS:
        first = env.observe(TASK, agent)
        later = env.observe(TASK, agent, turns)
        assert later[: len(first)] == first and len(later) == len(first) + 4
        assert later[-1] == {"role": "user", "content": "feedback two"}
    after = env.observe_after(TASK, "reviewer", {"writer": BUGGY}, turns)
    assert after[:-1] == env.observe(TASK, "reviewer", turns)[:-1]
    assert after[-1]["content"].startswith("feedback two") and BUGGY.strip() in after[-1]["content"]


def test_feedback_names_the_results_the_review_and_the_job(env):
    out = _score(env, BUGGY, REVIEW, BREAKING)
    writer = env.feedback(out, "writer")
    assert "Draft (writer): 3/6 tests passed. First failure:" in writer
    assert "Final (refactorer): 1/6 tests passed." in writer and REVIEW in writer
    assert "Write the function again" in writer
    assert "Review the next draft more usefully" in env.feedback(out, "reviewer")
    advised = env.feedback(out, "refactorer", advice="Handle hyphens.")
    assert "Handle hyphens." in advised and "Write the final function again" in advised


def test_the_baselines_views(env):
    solo = env.solo_observe(TASK)
    assert (
        solo[-1]["role"] == "user"
        and "Write the complete function `acronym`" in solo[-1]["content"]
    )
    joint = env.solo_act(TASK, _fenced(BUGGY))
    assert joint == {
        "writer": env.act(TASK, "writer", _fenced(BUGGY)),
        "reviewer": "",
        "refactorer": "",
    }
    alone = env.score([(TASK, joint)])[0]
    assert alone.record["final_from"] == "writer" and alone.record["reward"]["review"] == 0.0
    helpers = {"writer": BUGGY, "reviewer": REVIEW}
    assert env.observe_after_helpers(TASK, helpers) == env.observe_after(
        TASK, "refactorer", helpers
    )
    note = env.teammates_feedback(
        {**helpers, "refactorer": "def acronym(p):\n    return p"}, "writer"
    )
    assert "The reviewer answered" in note and "The refactorer answered" in note
    assert "The writer answered" not in note and "Revise your function" in note
    assert "Revise your review" in env.teammates_feedback({**helpers, "refactorer": ""}, "reviewer")


def test_settings_are_validated():
    with pytest.raises(ValueError, match="must be >= 0 with a positive sum"):
        CodeReviewSettings(
            tests_weight=-1.0, syntax_weight=0.5, review_weight=0.5, review_max_words=9
        )
    with pytest.raises(ValueError, match="review_max_words must be a positive integer"):
        CodeReviewSettings(
            tests_weight=1.0, syntax_weight=0.5, review_weight=0.5, review_max_words=0
        )


def test_an_open_helper_is_not_shown_and_the_reference_is_main_alone(env):
    """HumanEval's helper is open (no signature to follow, no reference): only main counts."""
    from orchestry.envs.code.humaneval import HUMANEVAL_AUX_SIGNATURE
    from orchestry.envs.code.problems import FunctionSpec, Problem

    main = 'def twice(x: int) -> int:\n    """Return 2 * x."""\n'
    task = Problem(
        id="humaneval/t",
        source="humaneval",
        prompt="Return 2 * x.",
        helpers=(FunctionSpec("aux", HUMANEVAL_AUX_SIGNATURE, ""),),
        main=FunctionSpec("twice", main, main + "    return 2 * x\n"),
        tests=("assert candidate(2) == 4",),
    )
    assert "def aux" not in env.observe(task, "writer")[-1]["content"]
    assert env.reference(task, "writer") == task.main.reference
    out = env.score([(task, {"writer": task.main.reference, "reviewer": "fine", "refactorer": ""})])
    assert out[0].total == 2.0
