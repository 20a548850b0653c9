"""The environment contract (orchestry/envs/base.py): every environment passes `check_env`."""

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
    return cases


@pytest.mark.parametrize("env,task,texts", code_env_cases())
def test_every_environment_passes_the_contract(env: Env, task, texts):
    outcomes = check_env(env, task, texts)
    # the reference solution solves its task; the empty joint action earns nothing
    assert outcomes[0].total > outcomes[1].total
    assert outcomes[0].record["correct"] is True and outcomes[1].total == 0.0


def test_the_contract_check_can_fail():
    """A broken environment (feedback that does not open the next turn) is caught."""
    env, task, texts = code_env_cases()[0].values

    class Broken:
        roles = env.roles

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
