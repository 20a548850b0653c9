"""Data-parallel training: a run stopped at one process resumes at two (`train.processes: 2`, which
makes `python -m orchestry train` start its ranks under torch.distributed.run); bad counts are named."""

import csv
import json

import pytest
import torch
from conftest import run_in

from orchestry import paths
from orchestry.envs.code.problems import read_problems
from orchestry.params import ParamsError, load_params, parse_params
from orchestry.stages import train
from orchestry.stages.from_params import make_env, make_policy, seed_everything
from orchestry.stages.train_from_params import loop_settings

pytestmark = pytest.mark.slow  # a real model trains or generates in every test here

TINY = {
    "sampling": {"max_new_tokens": 24},
    "train": {"max_steps": 2, "problems_per_step": 2, "group_size": 2, "checkpoint_every": 1},
}


def test_two_processes_resume_a_one_process_checkpoint(tiny_repo, monkeypatch):
    repo, write = tiny_repo
    write(**TINY)
    run_in(repo, "python", "-m", "orchestry", "prepare")
    monkeypatch.chdir(repo)
    # one process trains step 1 of the run and stops: its checkpoint and rollouts stay behind
    params = load_params("params.yaml")
    problems = read_problems(paths.split("train"))
    plan = train.schedule_problems(problems, 2, params.train.epochs, params.seed)[:2]
    ckpt_dir, work = train.run_places("train", params, problems, None, paths.TRAIN)
    seed_everything(params.seed)
    train.train_loop(
        loop_settings(params),
        make_policy(params),
        make_env(params),
        problems,
        plan[:1],
        work / "rollouts.jsonl",
        ckpt_dir,
    )
    assert torch.load(ckpt_dir / "last/state.pt", weights_only=False)["step"] == 1

    # the same run with two processes (the run hash leaves the count out)
    write(**{**TINY, "train": {**TINY["train"], "processes": 2}})
    assert train.run_hash(load_params("params.yaml"), problems) == ckpt_dir.name[len("train-") :]
    done = run_in(repo, "python", "-m", "orchestry", "--log", "logs/train.log", "train")
    assert "starting 2 processes" in done.stderr
    assert "resumed from checkpoint at step 1" in done.stderr
    assert "resumed from checkpoint at step 1" in (repo / "logs/train.log").read_text()

    history = list(csv.DictReader((repo / paths.HISTORY).open()))
    assert [int(row["step"]) for row in history] == [0, 1]
    rows = [json.loads(line) for line in (repo / paths.ROLLOUTS).open()]
    by_step = {s: [r for r in rows if r["step"] == s] for s in (0, 1)}
    # each step: 2 problems x G=2 joint actions, step 1's from both ranks, in the plan's order
    assert [r["problem_id"] for r in by_step[0]] == [p for p in plan[0] for _ in range(2)]
    assert [r["problem_id"] for r in by_step[1]] == [p for p in plan[1] for _ in range(2)]
    assert json.loads((repo / paths.TRAIN_METRICS).read_text())["steps"] == 2
    assert (repo / paths.ADAPTERS / "policy.json").is_file()
    assert not ckpt_dir.exists(), "checkpoints are removed after a finished run"
    assert not (repo / paths.TRAIN / ".partial").exists()


def test_a_count_the_launcher_contradicts_is_named(monkeypatch):
    params = parse_params({"train": {"processes": 2}})
    launcher = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    launcher |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for key, value in launcher.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(train.TrainingFailed, match="train.processes is 2 but .* WORLD_SIZE=1"):
        train.run(params)


def test_more_processes_than_problems_a_step_is_a_params_error():
    with pytest.raises(ParamsError, match="processes .3. must be at most problems_per_step .2."):
        parse_params({"train": {"processes": 3, "problems_per_step": 2}})
