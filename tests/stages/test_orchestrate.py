"""The opt-in orchestrate stage: end to end through `dvc repro optional/dvc.yaml` with the embedded
model, an interrupted training resumed to the same policy, and the error without trained adapters."""

import json

import pytest
import torch
from conftest import PIPELINE, ROOT, cpu_params, run_in

FIXED = ["team", "sequential", "round_robin"]


@PIPELINE
@pytest.mark.e2e
def test_dvc_repro_of_the_opt_in_pipeline(tiny_pipeline):
    repo, out = tiny_pipeline.repo, tiny_pipeline.optional_log  # the shared run's first command
    assert "Running stage 'optional/dvc.yaml:orchestrate'" in out
    assert "Running stage 'baseline" not in out  # only what orchestrate needs ran
    metrics = json.loads((repo / "results/orchestrate/metrics.json").read_text())
    assert metrics["pool"] == ["aux", "main", "tester"]
    assert [b["cost_weight"] for b in metrics["by_cost_weight"]] == [0.0, 0.01]
    for block in metrics["by_cost_weight"]:
        assert set(block["fixed"]) == set(FIXED) and block["verdict"]["best_fixed"] in FIXED
        assert block["learned"]["episodes"] == 1 * 2  # 1 test problem x evaluate.n_samples 2
        calls = block["learned"]["calls_mean"]
        assert 1 <= calls <= 2 and sum(map(sum, block["transitions"]["counts"])) == 2 * (calls + 1)
    rows = [json.loads(x) for x in (repo / "results/orchestrate/episodes.jsonl").open()]
    assert len(rows) == (2 + len(FIXED)) * 2
    for r in rows:  # every cost is the transcript's, every reward the environment's
        assert r["cost"] == sum(e["cost"] for e in r["transcript"]) and r["calls"] <= 2
        assert r["members"] == [e["member"] for e in r["transcript"]]
    team = [r for r in rows if r["method"] == "team"]
    assert all(r["members"] == ["aux", "main"] for r in team)
    history = (repo / "results/orchestrate/history.csv").read_text().splitlines()
    assert len(history) == 1 + 2 * 1 and history[0].startswith("cost_weight,update,loss")
    assert "## λ = 0.01" in (repo / "reports/orchestrate/results.md").read_text()
    for fig in ("cost_accuracy", "transitions"):
        assert (repo / f"reports/orchestrate/{fig}.png").stat().st_size > 10_000
    assert not list((repo / "cache/checkpoints").glob("orchestrate-*"))  # removed when done
    again = run_in(repo, "dvc", "repro", "optional/dvc.yaml")
    assert "Running stage" not in again.stdout


@pytest.mark.slow
def test_without_trained_adapters_it_names_them_and_writes_nothing(tiny_repo):
    repo, _ = tiny_repo
    run_in(repo, "python", "-m", "orchestry", "prepare")
    proc = run_in(repo, "python", "-m", "orchestry", "orchestrate", check=False)
    assert proc.returncode != 0
    assert "results/train/adapters is missing" in proc.stderr
    assert "orchestrate.adapters: base" in proc.stderr
    assert not (repo / "results/orchestrate").exists()


@pytest.mark.slow
def test_an_interrupted_training_resumes_to_the_same_policy(tmp_path):
    from orchestry.algos.agent_pool import TESTER, AgentPool
    from orchestry.envs.code.problems import load_problem_dir
    from orchestry.params import parse_params
    from orchestry.stages.from_params import make_env, make_policy, sampling_spec
    from orchestry.stages.orchestrate import train_head

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tasks = load_problem_dir(ROOT / "data/coop")[:3]
        policy = make_policy(cpu_params())
        env = make_env(parse_params({}))

        def train(updates, ckpt):
            params = parse_params(
                {
                    "sampling": {"max_new_tokens": 12},
                    "orchestrate": {
                        "updates": updates,
                        "episodes": 2,
                        "max_steps": 2,
                        "checkpoint_every": 1,
                        "cost_weights": [0.01],
                        "state_tokens": 64,
                    },
                }
            )
            pool = AgentPool(env, policy, sampling_spec(params), ["aux", "main", TESTER], 4.0)
            return train_head(params, pool, policy, tasks, 0, ckpt)

        policy.generate_calls = 0
        straight, history = train(2, tmp_path / "straight.pt")
        policy.generate_calls = 0
        train(1, tmp_path / "stopped.pt")  # stopped after one update
        policy.generate_calls = 99  # the checkpoint restores the sampling position
        resumed, resumed_history = train(2, tmp_path / "stopped.pt")
    finally:
        torch.set_num_threads(threads)
    assert [h["update"] for h in resumed_history] == [1, 2]
    assert resumed_history == history
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(AssertionError):  # a different run does not give the same policy
        other, _ = train(1, tmp_path / "other.pt")
        for a, b in zip(straight.parameters(), other.parameters(), strict=True):
            assert torch.equal(a, b)
