"""`train.rollouts_ahead`: the next step generated while the sandbox scores, never across a
checkpoint, and a resumed run takes the same rollouts as the uninterrupted one."""

import pytest
from conftest import ROOT, cpu_params

import orchestry.stages.train as train
from orchestry.algos.curriculum import schedule_problems
from orchestry.envs.code.problems import load_problem_dir
from orchestry.params import ParamsError, parse_params
from orchestry.stages.from_params import make_env, make_policy, seed_everything
from orchestry.stages.train_from_params import loop_settings

PARAMS = {
    "sampling": {"max_new_tokens": 24},
    "train": {
        "group_size": 2,
        "problems_per_step": 1,
        "checkpoint_every": 2,
        "warmup_steps": 0,
        "rollouts_ahead": 1,
    },
}


def test_ahead_needs_a_single_turn():
    with pytest.raises(ParamsError, match="rollouts_ahead"):
        parse_params({"train": {"rollouts_ahead": 1, "turns": 2}})


@pytest.mark.slow
def test_the_next_step_is_generated_before_the_update_but_not_across_a_checkpoint(
    tmp_path, monkeypatch
):
    params = cpu_params(PARAMS)
    problems = load_problem_dir(ROOT / "data/coop")[:2]
    plan = schedule_problems(problems, 1, 2, params.seed)[:3]  # 3 steps, a checkpoint after 2
    events: list[str] = []
    update = train.update_agents

    def recorded_update(*args, **kwargs):
        events.append("update")
        return update(*args, **kwargs)

    monkeypatch.setattr(train, "update_agents", recorded_update)

    def run(name: str, steps: int) -> list[dict]:
        seed_everything(params.seed)
        policy = make_policy(params)
        generate = policy.generate

        def recorded_generate(requests, sampling):
            events.append("generate")
            return generate(requests, sampling)

        policy.generate = recorded_generate
        out = tmp_path / name
        history = train.train_loop(
            loop_settings(params),
            policy,
            make_env(params),
            problems,
            plan[:steps],
            out / "r.jsonl",
            out / "ckpt",
        )
        return [
            {k: v for k, v in h.items() if k not in ("step_seconds", "tokens_per_s")}
            for h in history
        ]

    whole = run("whole", 3)
    # step 1 is generated before step 0's update; the checkpoint after step 1 holds step 2 back
    assert events == ["generate", "generate", "update", "update", "generate", "update"]
    events.clear()
    run("cut", 2)
    assert events == ["generate", "generate", "update", "update"]
    assert run("cut", 3) == whole
    assert (tmp_path / "cut/r.jsonl").read_text() == (tmp_path / "whole/r.jsonl").read_text()
    assert len(whole) == 3 and all(h["return_mean"] == h["return_mean"] for h in whole)
