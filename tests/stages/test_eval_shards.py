"""Evaluation over data-parallel processes (`evaluate.processes`): each rank answers its share of the
test problems with its own sampling stream, rank 0 writes every row in the split's order."""

import json

import pytest
from conftest import run_in

from orchestry import paths
from orchestry.algos.pg_update import TrainingFailed
from orchestry.eval.protocols import team
from orchestry.params import ParamsError, load_params, parse_params
from orchestry.stages.from_params import (
    make_env,
    make_generator,
    read_tasks,
    sampling_spec,
    seed_everything,
)
from orchestry.stages.shards import in_split_order, rows_in_shards

# float32: a rank's rows are compared with one process's to the bit (bfloat16, the default, rounds
# differently with the number of threads)
TINY = {
    "model": {"dtype": "float32"},
    "sampling": {"max_new_tokens": 24},
    "evaluate": {"n_samples": 2, "bootstrap": 20},
}


@pytest.mark.slow
def test_two_processes_answer_each_problem_as_its_rank_would_alone(tiny_repo, monkeypatch):
    repo, write = tiny_repo
    two = {"sets": {"coop": {"n_train": 3, "n_test": 2}}}  # a problem for each process
    write(**{**TINY, "prepare": two, "evaluate": {**TINY["evaluate"], "processes": 2}})
    run_in(repo, "python", "-m", "orchestry", "prepare")
    done = run_in(repo, "python", "-m", "orchestry", "baseline", "--name", "naive_concat")
    assert "starting 2 processes" in done.stderr

    monkeypatch.chdir(repo)
    params = load_params("params.yaml")
    tasks = read_tasks(params, "test")
    assert len(tasks) == 2
    rows = [json.loads(line) for line in paths.generations("naive_concat").open()]
    metrics = json.loads(paths.metrics("naive_concat").read_text())
    # every (problem, sample) once, in the split's order as one process writes them
    assert [(r["problem_id"], r["sample"]) for r in rows] == [
        (t.id, i) for t in tasks for i in range(2)
    ]
    assert (metrics["problems"], metrics["samples"]) == (2, 4)

    # rank r's rows are what one process answers for problem r alone from stream r (rank 0's stream
    # is one process's): the shares, the streams and the gather are each what they claim
    env = make_env(params, training=False)
    for rank, task in enumerate(tasks):
        seed_everything(params.seed)
        gen = make_generator(params, list(env.roles.agents), paths.method_dir("x"))
        gen.sample_stream = rank
        alone = team(gen, env, [task], 2, sampling_spec(params), "naive_concat")
        mine = [r for r in rows if r["problem_id"] == task.id]
        assert [r["code"] for r in mine] == [r["code"] for r in alone]
        untimed = [{k: v for k, v in r.items() if k != "seconds"} for r in alone]
        assert [{k: v for k, v in r.items() if k != "seconds"} for r in mine] == untimed
    # the streams differ: rank 1 does not repeat rank 0's samples on the same problem
    seed_everything(params.seed)
    gen = make_generator(params, list(env.roles.agents), paths.method_dir("x"))
    gen.sample_stream = 1
    other = team(gen, env, tasks[:1], 2, sampling_spec(params), "naive_concat")
    assert [r["code"] for r in other] != [r["code"] for r in rows[:2]]


def test_rows_are_put_back_in_the_split_order():
    class Task:
        def __init__(self, id):
            self.id = id

    tasks = [Task("a"), Task("b"), Task("c")]
    rank0 = [{"problem_id": p, "sample": s} for p in ("a", "c") for s in (0, 1)]
    rank1 = [{"problem_id": "b", "sample": s} for s in (0, 1)]
    merged = in_split_order([rank0, rank1], tasks)
    assert [(r["problem_id"], r["sample"]) for r in merged] == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
        ("c", 0),
        ("c", 1),
    ]


def test_a_count_the_launcher_contradicts_is_named(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    params = parse_params({"evaluate": {"processes": 2}})
    launcher = {"RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0"}
    launcher |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    for key, value in launcher.items():
        monkeypatch.setenv(key, value)
    rows_of_was_called = []
    with pytest.raises(TrainingFailed, match="evaluate.processes is 2 but .* WORLD_SIZE=3"):
        rows_in_shards(params, ["evaluate"], [], lambda t, r: rows_of_was_called.append(r) or [])
    assert rows_of_was_called == []


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"evaluate": {"processes": 2, "backend": "claude"}}, "processes .2. needs backend local"),
        (
            {"evaluate": {"processes": 2}, "env": {"name": "story", "story": {"judge": "claude"}}},
            "evaluate.processes .2. needs env.story.judge offline",
        ),
        ({"evaluate": {"processes": 0}}, "processes"),
    ],
)
def test_processes_that_cannot_share_the_work_are_params_errors(values, named):
    with pytest.raises(ParamsError, match=named):
        parse_params(values)
