"""Per-agent credit (train.credit_weight): each sample is also scored next to reference partners."""

import pytest
from conftest import ROOT

from orchestry.algos.tree import AgentGroup, JointNode, Sample, _score_with_reference_partners
from orchestry.envs.code.problems import load_problem_dir
from orchestry.params import parse_params
from orchestry.stages.from_params import make_env

WRONG_MAIN = "def acronym(phrase):\n    return phrase\n"


def _sample(agent: str, action: str) -> Sample:
    return Sample(agent, (), action, [], [], action)


def test_each_agent_is_credited_next_to_reference_partners():
    env = make_env(parse_params({}))
    task = next(p for p in load_problem_dir(ROOT / "data/coop") if p.id == "coop/acronym")
    aux = [_sample("aux", task.helpers[0].reference), _sample("aux", "")]
    main = [_sample("main", task.main.reference), _sample("main", WRONG_MAIN)]
    _score_with_reference_partners(env, [(task, {"aux": aux, "main": main})])
    # a right aux next to the reference main earns the full reward; a missing one does not
    assert aux[0].credit == pytest.approx(4.0) and aux[1].credit < 4.0
    # a main that ignores aux earns no cooperation even next to the reference aux
    assert main[0].credit == pytest.approx(4.0) and main[1].credit < 2.0


def test_values_mix_joint_return_and_credit():
    s1, s2 = _sample("aux", "a"), _sample("aux", "b")
    s1.credit, s2.credit = 4.0, 0.0
    n1 = JointNode(None, 1, {"aux": s1}, None, ret=1.0)  # type: ignore[arg-type]
    n2 = JointNode(None, 1, {"aux": s2}, None, ret=3.0)  # type: ignore[arg-type]
    group = AgentGroup("aux", 1, [s1, s2], [[n1], [n2]], credit_weight=0.25)
    assert group.values() == pytest.approx([0.75 * 1.0 + 0.25 * 4.0, 0.75 * 3.0 + 0.0])
    assert AgentGroup("aux", 1, [s1, s2], [[n1], [n2]], credit_weight=0.0).values() == [1.0, 3.0]
    s2.credit = None  # no reference partner for this task: joint values only
    assert group.values() == [1.0, 3.0]
