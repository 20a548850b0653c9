"""MAGRPO training with the embedded model: resume after kill -9, multi-turn trees, cross joints, 3 agents."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import ROOT, cpu_params, run_in, tiny_params

from orchestry.algos.curriculum import schedule_problems
from orchestry.algos.magrpo import sample_advantages
from orchestry.algos.pg_update import Optimizers, TrainingFailed, update_agents
from orchestry.algos.tree import rollout
from orchestry.envs.code.problems import difficulty_rank, load_problem_dir
from orchestry.params import parse_params
from orchestry.stages import prepare, train
from orchestry.stages.from_params import make_env, make_policy, sampling_spec, seed_everything
from orchestry.stages.train import train_loop
from orchestry.stages.train_from_params import (
    advantage_settings,
    loop_settings,
    optimizer_settings,
    rollout_settings,
    update_settings,
)


def adapter_bytes(repo: Path) -> dict[str, bytes]:
    root = repo / "results/train/adapters"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.safetensors"))}


@pytest.mark.slow
def test_kill_9_then_resume_gives_bit_identical_adapters(tiny_repo, tmp_path):
    repo, write = tiny_repo
    write(train={"max_steps": 2, "checkpoint_every": 1, "group_size": 2})
    run_in(repo, "python", "-m", "orchestry", "prepare")
    run_in(repo, "python", "-m", "orchestry", "train")
    reference = adapter_bytes(repo)
    assert reference

    # interrupted run: kill -9 once the first checkpoint exists, then run again
    for p in (repo / "results/train").glob("*"):
        subprocess.run(["rm", "-rf", str(p)], check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestry", "train"],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ckpts = repo / "cache/checkpoints"
    deadline = time.time() + 600
    while time.time() < deadline:
        states = list(ckpts.glob("train-*/last/state.pt"))
        if states and torch.load(states[0], weights_only=False)["step"] >= 1:
            break
        assert proc.poll() is None, "training ended before it could be killed"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (repo / "results/train/adapters").exists()
    resumed = run_in(repo, "python", "-m", "orchestry", "train")
    assert "resumed from checkpoint at step" in resumed.stderr
    assert adapter_bytes(repo) == reference
    assert not list(ckpts.glob("train-*")), "checkpoints are removed after a finished run"


@pytest.fixture(scope="module")
def coop_params():
    return cpu_params(
        {
            "sampling": {"max_new_tokens": 16},  # the tree's shape and the update's math, not text
            "train": {
                "group_size": 2,
                "kl_coef": 0.1,
                "turns": 2,
                "joint_mode": "cross",
                "gamma": 0.5,
            },
        }
    )


@pytest.mark.slow
def test_two_turn_cross_tree_and_update(coop_params):
    problems = load_problem_dir(ROOT / "data/coop")[:1]
    policy = make_policy(coop_params)
    env = make_env(coop_params)
    ro = rollout(policy, env, problems, sampling_spec(coop_params), rollout_settings(coop_params))
    first = [n for n in ro.nodes if n.turn == 1]
    second = [n for n in ro.nodes if n.turn == 2]
    assert len(first) == 4 and len(second) == 16  # G^2 joint actions per node, each node expanded
    for node in first:
        assert len(node.children) == 4
        assert node.ret == pytest.approx(node.total + 0.5 * sum(c.ret for c in node.children) / 4)
        # the next turn saw this node's feedback
        seen = env.observe(node.task, "main", node.children[0].samples["main"].history)
        assert seen[-1]["role"] == "user"
        assert "Tests passed" in seen[-1]["content"] or "missing" in seen[-1]["content"]
        assert seen[-2] == {"role": "assistant", "content": node.samples["main"].text}
    # 1 root group + 4 node groups per agent
    assert sorted((g.agent, g.turn) for g in ro.groups).count(("aux", 2)) == 4
    opts = Optimizers.create(
        policy, ["aux", "main"], False, optimizer_settings(coop_params), total=1
    )
    rows = sample_advantages(ro.groups, advantage_settings(coop_params))
    stats = update_agents(policy, opts, rows, update_settings(coop_params))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    # LoRA B starts at zero, so the first step's policy equals the reference: KL exactly 0
    assert stats["kl/aux"] == pytest.approx(0.0, abs=1e-6)
    # after one update the policy has left the reference: the first turn's short prompts show it
    first_rows = sample_advantages(
        [g for g in ro.groups if g.turn == 1], advantage_settings(coop_params)
    )
    stats = update_agents(policy, opts, first_rows, update_settings(coop_params))
    assert stats["kl/aux"] > 0 or stats["grad_norm/aux"] == 0


@pytest.mark.slow
def test_three_agents_on_three_role_problems():
    params = cpu_params(
        {
            "model": {"agents": ["aux1", "aux2", "main"]},
            "sampling": {"max_new_tokens": 40},
            "train": {"group_size": 2},
        }
    )
    problems = load_problem_dir(ROOT / "data/coop3")[:1]
    policy = make_policy(params)
    env = make_env(params)
    ro = rollout(policy, env, problems, sampling_spec(params), rollout_settings(params))
    assert {g.agent for g in ro.groups} == {"aux1", "aux2", "main"}
    assert all(len(n.samples) == 3 for n in ro.nodes)
    helper_prompt = env.observe(ro.nodes[0].task, "aux2")[-1]["content"]
    assert "def aux2(" in helper_prompt and "def aux1(" not in helper_prompt
    rows = sample_advantages(ro.groups, advantage_settings(params))
    assert set(rows) == {"aux1", "aux2", "main"}


@pytest.mark.slow
def test_curriculum_run_resumed_from_a_checkpoint_takes_the_same_steps(tmp_path):
    """`train.curriculum: easy_first`: stopped after 2 of 3 steps and resumed, the run draws the
    same problems and writes the same rollouts as the uninterrupted one."""
    params = cpu_params(
        {
            "sampling": {"max_new_tokens": 24},
            "train": {
                "group_size": 2,
                "problems_per_step": 1,
                "checkpoint_every": 1,
                "warmup_steps": 0,
                "curriculum": "easy_first",
            },
        }
    )
    problems = load_problem_dir(ROOT / "data/coop")[:2]
    plan = schedule_problems(problems, 1, 2, params.seed)[:3]  # 2 steps of the plan, 1 drawn

    def train(name: str, plan: list[list[str]]) -> list[dict]:
        seed_everything(params.seed)
        run = tmp_path / name
        history = train_loop(
            loop_settings(params),
            make_policy(params),
            make_env(params),
            problems,
            plan,
            run / "rollouts.jsonl",
            run / "ckpt",
        )
        return [
            {k: v for k, v in h.items() if k not in ("step_seconds", "tokens_per_s")}
            for h in history
        ]

    whole = train("whole", plan)
    train("cut", plan[:2])
    assert train("cut", plan) == whole
    assert (tmp_path / "cut/rollouts.jsonl").read_text() == (
        tmp_path / "whole/rollouts.jsonl"
    ).read_text()
    assert "curriculum/mastered" in whole[-1]
    state = torch.load(tmp_path / "cut/ckpt/last/state.pt", weights_only=False)
    assert sorted(state["curriculum"]) == sorted(p.id for p in problems)


@pytest.mark.slow
def test_a_sequential_environment_acts_in_role_order_in_the_tree():
    """code_review: the reviewer's g-th sample saw the writer's g-th draft, the refactorer both."""
    params = cpu_params(
        {
            "env": {"name": "code_review"},
            "sampling": {"max_new_tokens": 16},
            "train": {"turns": 2, "group_size": 2},
        }
    )
    problems = load_problem_dir(ROOT / "data/coop")[:1]
    policy, env = make_policy(params), make_env(params)
    ro = rollout(policy, env, problems, sampling_spec(params), rollout_settings(params))
    g = params.train.group_size
    first = [n for n in ro.nodes if n.turn == 1]
    assert len(first) == g and len(ro.nodes) == g + g * g  # aligned, each node expanded once
    for node in first:
        s = node.samples
        assert (
            s["writer"].prompt_ids == first[0].samples["writer"].prompt_ids
        )  # one prompt, G draws
        seen = env.observe_after(node.task, "reviewer", {"writer": s["writer"].action})
        assert s["reviewer"].prompt_ids == policy.prompt_ids("reviewer", seen)
        later = {"writer": s["writer"].action, "reviewer": s["reviewer"].action}
        assert env.observe_after(node.task, "refactorer", later)[-1]["content"].count(
            s["reviewer"].action or "\0"
        ) == (1 if s["reviewer"].action else 0)
    rows = sample_advantages(ro.groups, advantage_settings(params))
    assert set(rows) == {"writer", "reviewer", "refactorer"}
    with pytest.raises(ValueError, match="aligned"):
        cross = parse_params({"env": {"name": "code_review"}, "train": {"joint_mode": "cross"}})
        rollout(policy, env, problems, sampling_spec(cross), rollout_settings(cross))


def test_a_machine_where_dvclive_cannot_write_fails_before_training(tmp_path, monkeypatch):
    """The training record is written after the last step; a missing module must stop the stage
    at its start (a 20-minute GPU run once trained and then lost its outputs this way)."""
    monkeypatch.chdir(tmp_path)  # no prepared split here: the check must come first
    monkeypatch.setitem(sys.modules, "dvclive", None)  # importing it raises ImportError
    with pytest.raises(TrainingFailed, match="dvclive cannot write the training record"):
        train.run(parse_params(tiny_params()))
    assert not (tmp_path / "results").exists()


def test_by_grade_plan_takes_the_generated_problems_easiest_first(tmp_path, monkeypatch):
    """`train.curriculum: by_grade` through the train stage's plan: every problem once an epoch,
    grades never falling within it."""
    sets = {"gen": {"n_train": 12, "n_test": 0}, "humaneval": {"n_train": 0, "n_test": 0}}
    keys = {"prepare": {"sets": sets}, "train": {"problems_per_step": 3, "max_steps": 0}}
    monkeypatch.chdir(tmp_path)
    prepare.run(parse_params(keys))
    problems, plan = train.training_plan(
        parse_params({**keys, "train": {**keys["train"], "curriculum": "by_grade"}})
    )
    grade = {p.id: difficulty_rank(p) for p in problems}
    assert len(set(grade.values())) > 1  # the draw holds several grades
    for epoch in (plan[:4], plan[4:]):
        order = [grade[i] for step in epoch for i in step]
        assert order == sorted(order) and len(order) == 12
