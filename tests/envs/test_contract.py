"""The environment contract (orchestry/envs/base.py): every environment passes `check_env`."""

from types import SimpleNamespace

import pytest
from conftest import ROOT

from orchestry.envs.base import Env, Outcome, check_env
from orchestry.envs.code.problems import load_problem_dir
from orchestry.params import parse_params
from orchestry.stages.from_params import make_env


def _fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}\n```\n"


def code_env_cases():
    """(env, task, raw completion by agent) for the 2-agent and the 3-agent code sets."""
    cases = []
    for folder, agents in (
        ("data/coop", ["aux", "main"]),
        ("data/coop3", ["aux1", "aux2", "main"]),
    ):
        env = make_env(parse_params({"model": {"agents": agents}}))
        task = load_problem_dir(ROOT / folder)[0]
        texts = {a: _fenced(h.reference) for a, h in zip(agents, task.helpers, strict=False)}
        texts[agents[-1]] = _fenced(task.main.reference)
        cases.append(pytest.param(env, task, texts, id=folder))
    # tools on (docs/tools.md): the same contract, the same reward
    tools = make_env(parse_params({"env": {"tools": {"enabled": True}}}))
    task = load_problem_dir(ROOT / "data/coop")[0]
    texts = {"aux": _fenced(task.helpers[0].reference), "main": _fenced(task.main.reference)}
    cases.append(pytest.param(tools, task, texts, id="data/coop-tools"))
    return cases


STORY = {
    "writer": "Mira climbed the lighthouse stairs as the storm rolled in. She wanted the light "
    "to burn all night.",
    "editor": "But the wind broke the lamp glass and the flame began to die. Mira searched the "
    "store room for a spare pane.",
    "narrator": "At dawn the ships reached the harbour safely, and Mira watched the sun rise "
    "over the calm sea. The light had never gone out.",
}
WRITING = {
    "first": "A tenant's landlord refuses to fix a broken heater during winter.",
    "second": "The poster explains that the heater broke in November. Moreover, the landlord "
    "ignored three emails, so the tenant now pays for space heaters and asks whether rent can be "
    "withheld until the repair is made.",
}


def text_env_cases():
    """(env, task, texts) for the story, writing and code-review environments, built from params
    like a stage (their rows are not the code task's: no `correct`, reward parts instead)."""
    from orchestry.envs.story.tasks import load_set as stories
    from orchestry.envs.writing.tasks import load_set as writings

    story = make_env(parse_params({"env": {"name": "story"}}))
    writing = make_env(parse_params({"env": {"name": "writing"}}))
    review = make_env(parse_params({"env": {"name": "code_review"}}))
    problem = load_problem_dir(ROOT / "data/coop")[0]
    program = _fenced(problem.reference_program())
    workflow = {
        "writer": program,
        "reviewer": "The draft looks right; check the empty input.",
        "refactorer": program,
    }
    return [
        pytest.param(story, stories("story")[0], STORY, id="story"),
        pytest.param(writing, writings("tldr")[0], WRITING, id="writing-tldr"),
        pytest.param(review, problem, workflow, id="code_review"),
    ]


@pytest.mark.parametrize("env,task,texts", code_env_cases())
def test_every_environment_passes_the_contract(env: Env, task, texts):
    outcomes = check_env(env, task, texts)
    # the reference solution solves its task; the empty joint action earns nothing
    assert outcomes[0].total > outcomes[1].total
    assert outcomes[0].record["correct"] is True and outcomes[1].total == 0.0


@pytest.mark.parametrize("env,task,texts", text_env_cases())
def test_every_other_environment_passes_the_contract(env: Env, task, texts):
    outcomes = check_env(env, task, texts)
    # a written joint action earns more than the empty one, and its rows are text rows
    assert outcomes[0].total > outcomes[1].total >= 0.0
    assert "correct" not in outcomes[0].record and outcomes[0].record["text"]


@pytest.mark.parametrize("env,task,texts", [*code_env_cases(), *text_env_cases()])
def test_every_environment_shows_the_beam_judge_its_task(env: Env, task, texts):
    """`beam.judge_weight`'s judge reads the task as one model alone is given it (`solo_observe`)."""
    from orchestry.stages.from_params import ClaudeJointJudge

    class Client:  # answers as Claude would; keeps what it was asked
        def __init__(self) -> None:
            self.asked: list[str] = []

        def complete(self, system, messages, max_tokens=None, **_):
            self.asked.append(messages[0]["content"])
            return SimpleNamespace(text='{"score": 0.5, "reason": "ok"}', stop_reason="end_turn")

    client = Client()
    actions = {a: env.act(task, a, t) for a, t in texts.items()}
    assert ClaudeJointJudge(client, env)(task, actions) == 0.5  # type: ignore[arg-type]
    (shown,) = client.asked
    task_part = shown.split("</task>")[0]
    assert len(task_part.strip()) > len("<task>") + 20
    assert all(f'<answer agent="{a}">' in shown for a in env.roles.agents)


def test_the_contract_check_can_fail():
    """A broken environment (feedback that does not open the next turn) is caught."""
    env, task, texts = code_env_cases()[0].values

    class Broken:
        roles = env.roles
        sequential = False  # the agents answer a turn at once

        def observe(self, task, agent, history=()):
            return env.observe(task, agent)  # forgets the history

        def act(self, task, agent, text):
            return env.act(task, agent, text)

        def score(self, batch) -> list[Outcome]:
            return env.score(batch)

        def feedback(self, outcome, agent, advice=None):
            return env.feedback(outcome, agent, advice)

        def reference(self, task, agent):
            return env.reference(task, agent)

    with pytest.raises(AssertionError, match="observe"):
        check_env(Broken(), task, texts)


def test_an_environment_must_declare_its_turn_protocol():
    """`sequential` is declared on the class (no probing): an env without it fails the contract."""
    env, task, texts = code_env_cases()[0].values

    class Undeclared:
        roles = env.roles

        def observe(self, task, agent, history=()):
            return env.observe(task, agent, history)

    with pytest.raises(AssertionError, match="sequential: Undeclared must declare"):
        check_env(Undeclared(), task, texts)
