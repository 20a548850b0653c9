"""The supervised warm start's core (orchestry/algos/sft.py, issue 57): the answers it teaches are
what the environment reads back, and its updates lower the answer loss on the embedded model."""

from __future__ import annotations

import pytest
import torch
from conftest import DEFAULTS, lora, model_spec

from orchestry import paths
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.sft import (
    SftRow,
    SftSettings,
    answer_loss,
    answer_text,
    over_budget,
    solo_rows,
    supervised_epochs,
    team_rows,
)
from orchestry.envs.code.answers import without_docstrings
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.solo import SOLO_AGENT, SoloEnv
from orchestry.stages.from_params import make_env


def test_docstrings_go_and_the_code_stays() -> None:
    code = 'def f(x):\n    """Say it."""\n    return x + 1\n\n\ndef g():\n    """Only this."""\n'
    assert without_docstrings(code) == "def f(x):\n    return x + 1\n\ndef g():\n    pass"
    assert without_docstrings("not python (") == "not python ("
    assert answer_text("x = 1\n") == "```python\nx = 1\n```"


def test_an_answer_longer_than_the_budget_names_its_problem_and_agent() -> None:
    rows = [
        SftRow("aux", "p/1", [1], [5] * 8),  # 7 tokens and the end of sequence: fits 8
        SftRow("main", "p/1", [1], [5] * 9),
        SftRow("main", "p/2", [1], [5] * 3),
        SftRow("single", "p/3", [1], [5] * 20),
    ]
    assert over_budget(rows, 8) == {"p/1": ["main"], "p/3": ["single"]}
    assert over_budget(rows, 20) == {}


@pytest.fixture(scope="module")
def problems():
    return load_problem_dir(paths.PROBLEM_DIRS["coop"])[:3]


def test_the_taught_answer_is_what_the_env_reads_back(problems) -> None:
    env = make_env(DEFAULTS)
    task = problems[0]
    for agent in (*env.roles.helpers, env.roles.main):
        reference = env.reference(task, agent)
        read = env.act(task, agent, answer_text(reference))
        assert read.strip() == without_docstrings(reference).strip()


@pytest.mark.slow
def test_the_warm_start_lowers_the_answer_loss_of_team_and_single(problems) -> None:
    """Two problems, two epochs of one batch: in two steps each adapter's loss must fall by over a
    fifth (as the shared adapter's does below), for under half the work of three of each."""
    env = make_env(DEFAULTS)
    team = TeamPolicy(model_spec(), ("aux", "main"), lora(r=4, alpha=8), seed=0)
    solo = TeamPolicy(model_spec(), (SOLO_AGENT,), lora(r=4, alpha=8), seed=0)
    taught = problems[:2]
    rows = team_rows(team, env, taught)
    single = solo_rows(solo, SoloEnv(env), env, taught)
    assert {r.agent for r in rows} == {"aux", "main"} and len(single) == len(taught)
    settings = SftSettings(epochs=2, lr=2e-3, batch_rows=3, seed=0)
    for policy, own in ((team, rows), (solo, single)):
        by_agent = {a: [r for r in own if r.agent == a] for a in {r.agent for r in own}}
        with torch.no_grad():
            before = {a: answer_loss(policy, rs, grad=False).item() for a, rs in by_agent.items()}
        history = supervised_epochs(policy, own, settings)
        with torch.no_grad():
            after = {a: answer_loss(policy, rs, grad=False).item() for a, rs in by_agent.items()}
        assert len(history) == settings.epochs * len(by_agent)
        for agent in by_agent:
            assert after[agent] < 0.8 * before[agent], (agent, before, after)


@pytest.mark.slow
def test_a_shared_adapter_learns_both_roles_in_one_optimizer(problems) -> None:
    """`model.shared_adapter` (the pre-registration's decomposition-without-specialisation control):
    one adapter, one optimizer, the two roles' rows mixed in its batches."""
    env = make_env(DEFAULTS)
    team = TeamPolicy(model_spec(), ("aux", "main"), lora(r=4, alpha=8), shared_adapter=True)
    rows = team_rows(team, env, problems[:2])
    with torch.no_grad():
        before = answer_loss(team, rows, grad=False).item()
    history = supervised_epochs(team, rows, SftSettings(epochs=2, lr=2e-3, batch_rows=4, seed=0))
    with torch.no_grad():
        after = answer_loss(team, rows, grad=False).item()
    assert {h["agent"] for h in history} == {"shared"} and len(history) == 2  # 4 rows a batch
    assert after < 0.8 * before, (before, after)
