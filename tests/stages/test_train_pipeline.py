"""`train.parallel: pipeline`: on 2 processes one generates while the other updates, and the run is
the one-process run at the same `rollouts_ahead` (same rollouts, same adapters); bad settings are
named."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import run_in
from safetensors.torch import load_file

from orchestry import paths
from orchestry.agents.lora.dist import World
from orchestry.algos.pg_update import TrainingFailed
from orchestry.algos.rollout_queue import RolloutQueue, updates_before
from orchestry.params import ParamsError, load_params, parse_params
from orchestry.stages import train
from orchestry.stages.from_params import make_env, make_policy, seed_everything
from orchestry.stages.train_from_params import loop_settings
from orchestry.stages.train_pipeline import pipelined

PIPELINE = {"processes": 2, "parallel": "pipeline", "rollouts_ahead": 1}


@pytest.mark.parametrize("ahead", [1, 2, 3])
@pytest.mark.parametrize("start", [0, 2])
@pytest.mark.parametrize("every", [1, 2, 3, 100])
def test_updates_before_is_when_the_queue_generates_each_step(ahead, start, every):
    """The pipeline's generating rank waits for as many updates as the one-process queue has
    taken when it generates that step."""
    end, updates, seen = 9, start, {}

    def generate(step):
        seen[step] = updates
        return step, _Done()

    def checkpoint_after(step):
        return (step + 1) % every == 0

    with RolloutQueue(generate, ahead, end, checkpoint_after) as queue:
        for step in range(start, end):
            queue.take(step)
            updates += 1
    assert seen == {s: updates_before(s, ahead, start, checkpoint_after) for s in range(start, end)}


class _Done:
    def finish(self):
        return None


@pytest.mark.parametrize(
    "train_keys, match",
    [
        ({"parallel": "pipeline"}, "needs rollouts_ahead >= 1"),
        ({**PIPELINE, "processes": 3, "problems_per_step": 4}, "2 processes .* got processes 3"),
        ({**PIPELINE, "curriculum": "easy_first"}, "cannot draw an easy_first curriculum"),
        ({"parallel": "ring"}, "parallel"),
    ],
)
def test_bad_pipeline_settings_are_named(train_keys, match):
    with pytest.raises(ParamsError, match=match):
        parse_params({"train": train_keys})


def test_a_pipeline_of_three_processes_is_refused():
    assert not pipelined(World(rank=0, size=2), "data")
    assert not pipelined(World(), "pipeline")  # one process: the one-process loop
    with pytest.raises(TrainingFailed, match="2 processes .* started 3"):
        pipelined(World(rank=0, size=3), "pipeline")


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    return {
        f"{f.parent.name}/{k}": v
        for f in sorted(folder.rglob("*.safetensors"))
        for k, v in load_file(f).items()
    }


RANKS = """
import logging
import sys
from pathlib import Path

from orchestry.agents.lora.dist import end_world, start_world
from orchestry.params import load_params
from orchestry.stages import train
from orchestry.stages.from_params import make_env, make_policy, seed_everything
from orchestry.stages.train_from_params import loop_settings

logging.basicConfig(level=logging.INFO)
steps, out = int(sys.argv[1]), Path(sys.argv[2])
params = load_params("params.yaml")
problems, plan = train.training_plan(params)
world = start_world("cpu")
try:
    seed_everything(params.seed)
    policy, env = make_policy(params), make_env(params)
    settings = loop_settings(params)
    train.train_loop(
        settings, policy, env, problems, plan[:steps], out / "r.jsonl", out / "ckpt", world=world
    )
finally:
    end_world(world)
"""


@pytest.mark.slow
def test_two_pipelined_processes_train_and_resume_as_one_process_does(tiny_repo, monkeypatch):
    """A pipelined run stopped at its checkpoint (step 2 of 3), then resumed by the stage on 2
    pipelined processes, gives the rollouts and adapters of one process at the same
    rollouts_ahead, bit for bit. (Uninterrupted, the stage takes the same schedule: its checkpoint
    at step 2 keeps step 3 from being generated ahead, so the cut run is the whole run's first part.)"""
    repo, write = tiny_repo
    tiny = {"max_steps": 3, "problems_per_step": 2, "group_size": 2, "checkpoint_every": 2}
    write(train={**tiny, **PIPELINE})
    run_in(repo, "python", "-m", "orchestry", "prepare")
    # the run stopped after its checkpoint at step 2, its checkpoint and rollouts where the stage
    # keeps them; the stage resumes it for step 3
    (repo / "ranks.py").write_text(RANKS)
    torchrun = ("python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")
    run_in(repo, *torchrun, "ranks.py", "2", "cut")
    monkeypatch.chdir(repo)
    params = load_params("params.yaml")
    problems, plan = train.training_plan(params)
    ckpt_dir, partial = train.run_places("train", params, problems, None, paths.TRAIN)
    shutil.copytree(repo / "cut/ckpt", ckpt_dir)
    partial.mkdir(parents=True)
    shutil.copyfile(repo / "cut/r.jsonl", partial / "rollouts.jsonl")
    resumed = run_in(repo, "python", "-m", "orchestry", "train")
    assert "starting 2 processes" in resumed.stderr
    assert "resumed from checkpoint at step 2" in resumed.stderr

    # the same params in this one process (the loop pipelined processes reproduce)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank ran: the same float sums
    try:
        seed_everything(params.seed)
        policy = make_policy(params)
        one = repo / "one"
        history = train.train_loop(
            loop_settings(params),
            policy,
            make_env(params),
            problems,
            plan,
            one / "r.jsonl",
            one / "ckpt",
        )
    finally:
        torch.set_num_threads(threads)
    policy.save_adapters(one / "adapters")

    rows = (repo / paths.ROLLOUTS).read_text()
    assert rows == (one / "r.jsonl").read_text()
    assert len({json.loads(r)["step"] for r in rows.splitlines()}) == 3
    metrics = json.loads((repo / paths.TRAIN_METRICS).read_text())
    assert metrics["steps"] == len(history) == 3
    pipelined_adapters, one_adapters = _tensors(repo / paths.ADAPTERS), _tensors(one / "adapters")
    assert pipelined_adapters.keys() == one_adapters.keys() and one_adapters
    for key, value in one_adapters.items():
        assert torch.equal(pipelined_adapters[key], value), key
    # the update ran on the rollouts rank 1 sent, and rank 1 generated from what it sent back
    assert any(h["grad_norm/aux"] > 0 or h["grad_norm/main"] > 0 for h in history[:2])
