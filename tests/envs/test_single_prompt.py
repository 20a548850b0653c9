"""`env.single_prompt` (issue 57's control): what one model alone is told on the code task, the
entry point only (`plain`, the prompt as it always was) or also the helpers' contract the team's main
is told (`helper_contract`)."""

import pytest
from conftest import ROOT

from orchestry.envs.code import prompts
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.solo import SOLO_AGENT
from orchestry.params import ParamsError, parse_params
from orchestry.stages.from_params import make_env, make_solo_env

PROBLEMS = load_problem_dir(ROOT / "data/coop") + load_problem_dir(ROOT / "data/coop3")

AREA_GAP = (
    "Task: Compare the areas of two rectangles.\n"
    "The helper `aux(width, height)` returns the area of one rectangle.\n"
    "The main function `area_gap(w1, h1, w2, h2)` computes both areas with aux and returns the\n"
    "absolute difference between them.\n\n\n"
    "Write the complete function below (you may define helper functions of your own):\n\n"
    "```python\n"
    "def area_gap(w1: int, h1: int, w2: int, h2: int) -> int:\n"
    '    """Return the absolute difference of the two rectangles\' areas (each area from aux)."""\n'
    "\n```"
)
"""The single agent's user message on coop/area_gap before `env.single_prompt` existed."""


def _old_single(problem) -> str:
    """The single agent's user message as it was built before `env.single_prompt` existed."""
    return (
        f"Task: {problem.prompt}\n\nWrite the complete function below (you may define helper "
        f"functions of your own):\n\n```python\n{problem.main.signature}\n```"
    )


def test_plain_is_the_prompt_as_it_was():
    by_id = {p.id: p for p in PROBLEMS}
    assert prompts.single_messages(by_id["coop/area_gap"], contract=False) == [
        {"role": "system", "content": prompts.SYSTEM_PROMPT},
        {"role": "user", "content": AREA_GAP},
    ]
    for problem in PROBLEMS:
        user = prompts.single_messages(problem, contract=False)[1]["content"]
        assert user == _old_single(problem), problem.id


def test_helper_contract_states_every_helper_and_the_entry_point():
    assert any(len(p.helpers) > 1 for p in PROBLEMS)  # coop3: two helpers
    for problem in PROBLEMS:
        system, user = prompts.single_messages(problem, contract=True)
        assert system == {"role": "system", "content": prompts.SYSTEM_PROMPT}
        text = user["content"]
        assert text.startswith(f"Task: {problem.prompt}\n\n")
        for spec in problem.helpers:  # as main is shown them
            assert f"`{spec.name}`" in text and spec.signature in text
        sigs = "\n\n".join(spec.signature for spec in problem.helpers)
        assert f"```python\n{sigs}\n```" in prompts.main_prompt(problem)
        assert f"```python\n{sigs}\n```" in text
        assert text.endswith(f"```python\n{problem.main.signature}\n```")
        assert "do not define the helpers" not in text


@pytest.mark.parametrize("setting", ["plain", "helper_contract"])
def test_the_setting_reaches_the_envs_built_from_params(setting):
    """Training (the single agent's view, what sft and train_single read) and evaluation."""
    params = parse_params({"env": {"single_prompt": setting}})
    task = PROBLEMS[0]
    expected = prompts.single_messages(task, contract=setting == "helper_contract")
    assert make_env(params, training=False).solo_observe(task) == expected
    assert make_solo_env(params).observe(task, SOLO_AGENT) == expected


@pytest.mark.parametrize("env", ["story", "writing", "code_review"])
def test_another_environment_refuses_the_helper_contract(env):
    with pytest.raises(
        ParamsError, match=f"env.single_prompt helper_contract needs env.name code, not {env}"
    ):
        parse_params({"env": {"name": env, "single_prompt": "helper_contract"}})
    parse_params({"env": {"name": env, "single_prompt": "plain"}})
