"""The evaluation code env's robust test pass rate (issue #57), scored in the real sandbox: a
constant answer earns none of it, the reference all of it; the training env's outcomes are unchanged."""

from conftest import limits

from orchestry.envs.base import Roles
from orchestry.envs.code import env as code_env
from orchestry.envs.code.env import CodeEnv
from orchestry.envs.code.reward import RewardWeights
from orchestry.envs.code.tasks import load_set
from orchestry.params import parse_params
from orchestry.stages.from_params import make_env

ROLES = Roles.from_agents(["aux", "main"])
WORKERS = 2
# coop/free_slots: a main answering `[]` passes 3 of its 7 asserts (the plain rate pays 3/7)
PROBLEMS = {p.id: p for p in load_set("coop") if p.id in ("coop/free_slots", "coop/acronym")}

METRIC_KEYS = {
    "reward/structure",
    "reward/syntax",
    "reward/tests",
    "reward/cooperation",
    "reward/total",
    "pass_rate",
    "coop_rate",
    "correct_rate",
    "aux_defined_rate",
    "main_calls_aux_rate",
    "aux_correct_rate",
    "main_correct_ref_aux_rate",
}
RECORD_KEYS = {
    "helper_names",
    "main_name",
    "program",
    "reward",
    "main_defined",
    "correct",
    "aux_defined",
    "aux_correct",
    "main_correct_ref_aux",
    "n_passed",
    "n_tests",
    "first_failure",
}


def _env(robust: bool) -> CodeEnv:
    weights = RewardWeights(**parse_params({}).reward.model_dump())
    return CodeEnv(
        ROLES,
        weights,
        limits(),
        WORKERS,
        rename_lone_helper=False,
        single_prompt="plain",
        robust=robust,
    )


def _batch():
    slots, acronym = PROBLEMS["coop/free_slots"], PROBLEMS["coop/acronym"]
    constant = f"def {slots.main.name}(*args, **kwargs):\n    return []\n"
    aux = slots.helpers[0].reference
    return [
        (slots, {"aux": aux, "main": constant}),
        (slots, {"aux": aux, "main": slots.main.reference}),
        (slots, {"aux": aux, "main": "x = 1\n"}),  # main never defined: nothing runs
        (acronym, {"aux": acronym.helpers[0].reference, "main": acronym.main.reference}),
    ]


def test_a_constant_answer_earns_no_robust_rate_and_the_reference_all(monkeypatch):
    calls = []

    def counted(problems, lim, workers):
        calls.append(sorted(p.id for p in problems))
        return real(problems, lim, workers)

    real = code_env.trivial_tests
    monkeypatch.setattr(code_env, "trivial_tests", counted)
    env = _env(robust=True)
    constant, reference, undefined, other = env.score(_batch())
    assert constant.metrics["pass_rate"] > 0  # the plain rate pays the `[]` answer
    assert constant.metrics["robust_pass_rate"] == constant.record["robust_pass_rate"] == 0.0
    assert reference.metrics["robust_pass_rate"] == reference.record["robust_pass_rate"] == 1.0
    assert undefined.record["robust_pass_rate"] == 0.0
    assert other.metrics["robust_pass_rate"] == 1.0
    # one sandbox batch for the batch's new problems, none for problems seen before
    assert calls == [["coop/acronym", "coop/free_slots"]]
    env.score(_batch()[:1])
    assert len(calls) == 1


def test_the_training_env_scores_exactly_as_before():
    plain = _env(robust=False).score(_batch())
    for outcome in plain:
        assert set(outcome.metrics) <= METRIC_KEYS and "robust_pass_rate" not in outcome.metrics
        assert set(outcome.record) == RECORD_KEYS
    robust = _env(robust=True).score(_batch())
    for a, b in zip(plain, robust, strict=True):  # the flag adds its rate and changes nothing else
        assert a.total == b.total
        assert {k: v for k, v in b.metrics.items() if k != "robust_pass_rate"} == a.metrics
        assert {k: v for k, v in b.record.items() if k != "robust_pass_rate"} == a.record


def test_only_the_evaluation_code_env_is_robust():
    params = parse_params({})
    assert make_env(params, training=False).robust is True
    assert make_env(params).robust is False
    story = make_env(parse_params({"env": {"name": "story"}}), training=False)
    assert not hasattr(story, "robust")
