"""The single-agent GRPO baseline: `train_single` trains one adapter with the team's train section,
`evaluate_single` puts it on the test split as the method `single_grpo` (embedded model, in-process)."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import ROOT, tiny_params

from orchestry import io, paths
from orchestry.envs.code.problems import load_problem_dir, problem_to_dict
from orchestry.eval.metrics import compute_metrics
from orchestry.params import parse_params
from orchestry.stages import evaluate_single, train_single
from orchestry.stages.from_params import make_policy, single_agent_params

# a real model trains or generates in every test here; one process takes them all, so the module's
# training run (`trained`, half a minute) is made once, not once per `make test` process
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("train_single")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """A project folder with two train and two test problems, after `train_single` ran there
    (2 steps of 2 problems, group 2); returns (folder, params)."""
    root = tmp_path_factory.mktemp("single")
    params = parse_params(
        tiny_params(train={"max_steps": 2, "problems_per_step": 2, "group_size": 2})
    )
    # training problems on which the tiny model's lone answers differ in reward (else no advantage)
    problems = [problem_to_dict(p) for p in load_problem_dir(ROOT / "data/coop")[:5]]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # every pipeline path is relative to the project root
        io.write_jsonl(paths.split("train"), problems[3:5])
        io.write_jsonl(paths.split("test"), problems[:2])
        train_single.run(params)
    return root, params


def test_train_single_writes_a_trained_adapter_and_its_history(trained, monkeypatch):
    root, params = trained
    monkeypatch.chdir(root)
    history = pd.read_csv(paths.SINGLE_HISTORY)
    assert len(history) == 2 and history["step"].tolist() == [0, 1]
    assert json.loads(paths.SINGLE_METRICS.read_text())["steps"] == 2
    saved = json.loads((paths.SINGLE_ADAPTERS / "policy.json").read_text())
    assert list(saved["agents"]) == ["single"]
    policy = make_policy(single_agent_params(params))
    initial = policy.adapter_state("single")
    policy.load_adapters(paths.SINGLE_ADAPTERS)
    assert any(not torch.equal(initial[k], v) for k, v in policy.adapter_state("single").items())
    # checkpoints were taken under its own name (train.checkpoint_every 1) and gone when done
    assert Path("cache/checkpoints").is_dir() and not list(Path("cache/checkpoints").iterdir())
    assert not paths.TRAIN.exists()  # the team's outputs are not touched


def test_evaluate_single_writes_metrics_derived_from_its_generations(trained, monkeypatch):
    root, params = trained
    monkeypatch.chdir(root)
    evaluate_single.run(params)
    rows = io.read_jsonl(paths.generations("single_grpo"))
    e = params.evaluate
    assert len(rows) == 2 * e.n_samples  # two test problems, n samples each
    assert {r["method"] for r in rows} == {"single_grpo"}
    assert all(set(r["code"]) == {"single"} for r in rows)
    metrics = json.loads(paths.metrics("single_grpo").read_text())
    assert metrics == json.loads(
        json.dumps(compute_metrics(rows, list(e.ks), e.bootstrap, params.seed))
    )
