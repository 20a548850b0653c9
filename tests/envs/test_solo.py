"""The single-agent view (orchestry/envs/solo.py): one model alone on a team's task, as an `Env`."""

import pytest
from conftest import ROOT

from orchestry.envs.base import Turn
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.solo import SOLO_AGENT, SoloEnv
from orchestry.params import parse_params
from orchestry.stages.from_params import make_env, make_solo_env


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def code():
    """The code env the team trains on, its single-agent view, and a problem."""
    params = parse_params({})
    return make_env(params), make_solo_env(params), load_problem_dir(ROOT / "data/coop")[0]


def test_one_agent_sees_the_solo_prompt_and_its_history(code):
    team, solo, task = code
    assert solo.roles.agents == (SOLO_AGENT,) and solo.roles.helpers == ()
    assert solo.sequential is False
    first = solo.observe(task, SOLO_AGENT)
    assert first == team.solo_observe(task)
    assert first != team.observe(task, team.roles.main)  # not the main agent's team prompt
    later = solo.observe(task, SOLO_AGENT, [Turn("my answer", "Tests failed: fix it")])
    assert later[: len(first)] == first
    assert later[len(first) :] == [
        {"role": "assistant", "content": "my answer"},
        {"role": "user", "content": "Tests failed: fix it"},
    ]
    with pytest.raises(ValueError, match="unknown agent 'main'"):
        solo.observe(task, "main")


def test_an_answer_scores_as_the_single_baseline_scores_it(code):
    """The view's outcome is the team env's on `solo_act` (what `eval/protocols.single` scores)."""
    team, solo, task = code
    right = _fenced(task.reference_program())
    wrong = _fenced(f"{task.main.signature}\n    return None\n")
    texts = [right, wrong]
    mine = solo.score([(task, {SOLO_AGENT: solo.act(task, SOLO_AGENT, t)}) for t in texts])
    baseline = team.score([(task, team.solo_act(task, t)) for t in texts])
    assert [o.total for o in mine] == [o.total for o in baseline]
    assert [o.record["program"] for o in mine] == [o.record["program"] for o in baseline]
    assert mine[0].record["correct"] and not mine[1].record["correct"]
    assert mine[0].total > mine[1].total
    # feedback as the team's main agent would get it; no reference partner to be credited next to
    assert solo.feedback(mine[1], SOLO_AGENT) == team.feedback(baseline[1], team.roles.main)
    assert solo.reference(task, SOLO_AGENT) is None


def test_a_text_environment_gets_the_same_view():
    """The story env: a lone story cut into the roles' parts, scored like the single baseline's."""
    from orchestry.envs.story.tasks import load_set

    team = make_env(parse_params({"env": {"name": "story"}}))
    solo = SoloEnv(team)  # type: ignore[arg-type]  # every env has the solo views
    task = load_set("story", ROOT / "data/story")[0]
    story = "Mira climbed the stairs.\n\nThe storm broke the glass.\n\nAt dawn the ships came home."
    [mine] = solo.score([(task, {SOLO_AGENT: solo.act(task, SOLO_AGENT, story)})])
    [theirs] = team.score([(task, team.solo_act(task, story))])
    assert mine.total == theirs.total and mine.record == theirs.record
    assert solo.observe(task, SOLO_AGENT) == team.solo_observe(task)
