"""The orchestrator's agent pool (orchestry/algos/agent_pool.py): the real embedded model on the
real code environment and sandbox, seen through a generator that keeps each request it passes on."""

import pytest
from conftest import ROOT, cpu_params

from orchestry.algos.agent_pool import TESTER, AgentPool, Entry, fixed_orders, transitions
from orchestry.envs.base import Outcome


class Recording:
    """The real policy, with the requests it was given kept for the assertions."""

    def __init__(self, gen):
        self.gen, self.requests = gen, []

    def generate(self, requests, sampling):
        self.requests.append(list(requests))
        return self.gen.generate(requests, sampling)


@pytest.fixture(scope="module")
def real():
    import torch

    from orchestry.envs.code.problems import load_problem_dir
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    params = cpu_params({"sampling": {"max_new_tokens": 24}})
    env = make_env(params)  # with train.feedback: the tester's report in words
    gen = Recording(make_policy(params))
    pool = AgentPool(env, gen, sampling_spec(params), ["aux", "main", TESTER], tool_cost=7.0)
    yield pool, gen, load_problem_dir(ROOT / "data/coop")[:2]
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_calls_tester_reports_and_what_each_role_sees(real):
    pool, gen, (task, _) = real
    (aux,) = pool.call([(task, "aux", ())])
    assert aux.member == "aux" and 0 < aux.cost <= 24  # the tokens it generated
    assert aux.action == pool.env.act(task, "aux", aux.text) and aux.outcome is None
    (test,) = pool.call([(task, TESTER, (aux,))])
    joint = pool.joint_action(task, (aux,))
    assert joint["aux"] == aux.action and joint["main"] == pool.env.act(task, "main", "")
    expected = pool.env.score([(task, joint)])[0]
    assert test.cost == 7.0 and test.outcome.total == expected.total
    assert test.text.startswith(f"reward {expected.total:.2f}")
    # the tester's verdict is reused for the final score of a transcript that ends with it
    assert pool.score([(task, (aux, test))])[0] is test.outcome

    t = (aux, test)
    # aux sees its answer and the report; main (who has not acted) sees aux's code
    aux_obs = pool.observation(task, "aux", t)
    assert aux_obs[-2] == {"role": "assistant", "content": aux.text}
    assert aux_obs[-1]["content"] == pool.env.feedback(test.outcome, "aux")
    main_obs = pool.observation(task, "main", t)
    if aux.action.strip():
        assert aux.action.strip() in main_obs[-1]["content"]
    assert main_obs == pool.env.observe_after_helpers(task, {"aux": aux.action})
    # an answer no tester ran is not history: the next call redraws it
    (again,) = pool.call([(task, "aux", t)])
    assert pool.history("aux", (*t, again)) == pool.history("aux", t)
    assert len(pool.history("aux", t)) == 1
    # one generate call for a batch of role calls, whatever the members
    before = len(gen.requests)
    entries = pool.call([(task, "main", ()), (task, TESTER, ()), (task, "aux", t)])
    assert [e.member for e in entries] == ["main", TESTER, "aux"]
    assert len(gen.requests) == before + 1 and len(gen.requests[-1]) == 2


@pytest.mark.slow
def test_fixed_orders_on_the_real_env(real):
    pool, gen, tasks = real
    orders = fixed_orders(("aux", "main"), pool.members, 4)
    before = len(gen.requests)
    team = pool.run_order(tasks, orders["team"])
    # the team: one generate call, nobody shown a teammate (every prompt is the plain observation)
    assert len(gen.requests) == before + 1
    asked = gen.requests[-1]
    assert [r.agent for r in asked] == ["aux", "main", "aux", "main"]
    assert [r.messages for r in asked] == [
        pool.env.observe(t, a) for t in tasks for a in ("aux", "main")
    ]
    for (transcript, outcome), task in zip(team, tasks, strict=True):
        assert [e.member for e in transcript] == ["aux", "main"]
        assert isinstance(outcome, Outcome)
        expected = pool.env.score([(task, pool.joint_action(task, transcript))])[0]
        assert outcome.total == expected.total
    rr = pool.run_order(tasks[:1], orders["round_robin"])
    assert [e.member for e in rr[0][0]] == ["aux", "main", TESTER, "aux"]


def test_orders_transitions_features_and_bad_pools():
    orders = fixed_orders(("a", "b", "m"), ("a", "b", "m", TESTER), 5)
    assert orders == {
        "team": [["a", "b", "m"]],
        "sequential": [["a"], ["b"], ["m"]],
        "round_robin": [["a"], ["b"], ["m"], [TESTER], ["a"]],
    }
    t = transitions([["a", "m"], ["m"], ["a", "a", "m"]], ["a", "m"])
    assert t["rows"] == ["start", "a", "m"] and t["cols"] == ["a", "m", "stop"]
    assert t["counts"] == [[2, 1, 0], [1, 2, 0], [0, 0, 3]]

    class Env:
        class roles:  # noqa: N801
            agents, helpers, main = ("aux", "main"), ("aux",), "main"

    for bad in (["aux"], ["aux", "main", "planner"], ["aux", "main", "main"], []):
        with pytest.raises(ValueError, match="pool"):
            AgentPool(Env(), None, None, bad, 1.0)
    pool = AgentPool(Env(), None, None, ["aux", "main", TESTER], 1.0)
    done = Outcome(2.5, {}, {})
    entries = (Entry("aux", "x", "x", 3), Entry(TESTER, "r", "", 1.0, done))
    # calls per member and in all over max_steps, the last reward, tested-now flag
    assert pool.features(entries, 4) == [0.25, 0.0, 0.25, 0.5, 2.5, 1.0]
    assert pool.features((), 4) == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.slow
def test_the_pool_on_the_story_env():
    """Any environment: three roles and the tester on the story task (offline judge)."""
    import torch

    from orchestry.envs.story.tasks import load_set
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        params = cpu_params({"env": {"name": "story"}, "sampling": {"max_new_tokens": 16}})
        env = make_env(params)
        members = [*env.roles.agents, TESTER]
        pool = AgentPool(env, make_policy(params), sampling_spec(params), members, 5.0)
        task = load_set("story", ROOT / "data/story")[0]
        orders = fixed_orders(env.roles.agents, members, 5)
        ((seq, outcome),) = pool.run_order([task], orders["sequential"])
        rr = pool.run_order([task], orders["round_robin"])[0][0]
    finally:
        torch.set_num_threads(threads)
    writer, editor, narrator = env.roles.agents
    assert [e.member for e in seq] == [writer, editor, narrator]
    # the narrator (main) saw the two earlier parts
    shown = pool.observation(task, narrator, seq[:2])
    assert shown == env.observe_after_helpers(task, {writer: seq[0].action, editor: seq[1].action})
    assert outcome.total == env.score([(task, pool.joint_action(task, seq))])[0].total
    assert [e.member for e in rr] == [*env.roles.agents, TESTER, writer]
    assert rr[3].outcome is not None and rr[3].cost == 5.0
    # the writer's redraw after the tester sees its part and the tester's report
    assert pool.history(writer, rr[:4])[0].feedback == env.feedback(rr[3].outcome, writer)
