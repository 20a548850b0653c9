"""The `sft` stage in the tiny pipeline run (`tiny_pipeline`, sft.enabled): its adapters lower the
answer loss, and `train` and `train_single` start from them (issue 57)."""

import json

import pytest
from conftest import PIPELINE
from safetensors.torch import load_file


def lora_b(folder):
    """The LoRA B matrices of a saved adapter (zero in a fresh adapter: peft's init)."""
    weights = load_file(str(folder / "adapter_model.safetensors"))
    return {k: v.float() for k, v in weights.items() if "lora_B" in k}


@PIPELINE
@pytest.mark.e2e
def test_the_warm_start_lowers_every_agents_answer_loss(tiny_pipeline):
    metrics = json.loads((tiny_pipeline.repo / "results/sft/metrics.json").read_text())
    assert set(metrics["agents"]) == {"aux", "main", "single"}
    for agent, m in metrics["agents"].items():
        assert m["steps"] >= 1 and m["rows"] >= 1, agent
        assert m["loss_after"] < m["loss_before"], (agent, m)


@PIPELINE
@pytest.mark.e2e
@pytest.mark.parametrize(
    ("trained", "warm"),
    [
        ("train/adapters/aux", "sft/team/aux"),
        ("train/adapters/main", "sft/team/main"),
        ("train_single/adapters/single", "sft/single/single"),
    ],
)
def test_training_starts_from_the_warm_start(tiny_pipeline, trained, warm):
    """Two tiny RL steps move an adapter little: the trained B matrices stay near the warm start's,
    far from a fresh adapter's zeros (which they would be near had training started fresh)."""
    results = tiny_pipeline.repo / "results"
    after, start = lora_b(results / trained), lora_b(results / warm)
    assert after.keys() == start.keys() and after
    for key, b in start.items():
        assert b.norm() > 0, key
        assert (after[key] - b).norm() < 0.5 * b.norm(), key


@pytest.mark.parametrize("stage", ["train", "train_single"])
def test_training_from_a_missing_warm_start_names_the_sft_stage(stage, tmp_path, monkeypatch):
    """sft.enabled without the sft stage's adapters: one clear error before any model loads (it was
    `[Errno 2] No such file or directory: 'results/sft/team/policy.json'` after loading one)."""
    import importlib

    from conftest import tiny_params

    from orchestry.params import parse_params

    monkeypatch.chdir(tmp_path)
    params = parse_params(tiny_params(sft={"enabled": True}), "tiny")
    with pytest.raises(FileNotFoundError, match=r"run the sft stage first \(dvc repro sft\)"):
        importlib.import_module(f"orchestry.stages.{stage}").run(params)
