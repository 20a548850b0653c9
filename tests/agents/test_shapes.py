"""Random models of named shapes (`agents/lora/shapes.py`) and the report of a non-finite update.

A scaled-down shape (24 layers of width 256: deep and wide enough that a zero vector at position 0
sends the LoRA gradients to infinity, as at 3B) is built as a model folder with the embedded
tokenizer and loaded through the normal `model.name=<folder>` path."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import cpu_params

from orchestry.agents.lora.shapes import (
    SHAPES,
    build_model_folder,
    embedded_tokenizer,
    random_model,
    shape_named,
)
from orchestry.algos.pg_update import Optimizers, TrainingFailed, update_agents
from orchestry.stages.from_params import make_policy
from orchestry.stages.train_from_params import optimizer_settings, update_settings

MODEL_CACHE = Path(__file__).resolve().parents[2] / "cache" / "models"
TINY = replace(
    SHAPES["qwen2.5-coder-3b"],
    hidden=256,
    intermediate=512,
    layers=24,
    heads=4,
    kv_heads=2,
    vocab=49152,
    max_position_embeddings=2048,
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shapes") / "tiny-qwen2"
    return build_model_folder(TINY, out, embedded_tokenizer(MODEL_CACHE), seed=0)


@pytest.fixture()
def policy(folder: Path):
    params = cpu_params(
        {"model": {"name": str(folder), "cache_dir": str(MODEL_CACHE)}, "train": {"microbatch": 2}}
    )
    return make_policy(params), params


def _rows(policy) -> dict[str, list]:
    prompt = policy.prompt_ids("aux", [{"role": "user", "content": "Write aux."}])
    return {"aux": [(prompt, [9, 10, 11], 1.0), (prompt, [12, 13], -1.0)]}


def test_named_shapes_are_the_real_models_sizes() -> None:
    big = shape_named("qwen2.5-coder-3b")
    assert (big.hidden, big.layers, big.heads, big.kv_heads, big.vocab) == (
        2048,
        36,
        16,
        2,
        151936,
    )
    with pytest.raises(ValueError, match="unknown model shape 'qwen-7b'.*qwen2.5-coder-1.5b"):
        shape_named("qwen-7b")


def test_a_vocab_smaller_than_the_tokenizer_is_refused() -> None:
    tokenizer = embedded_tokenizer(MODEL_CACHE)
    with pytest.raises(ValueError, match="vocab 1000 does not cover the tokenizer's 49152 ids"):
        random_model(replace(TINY, vocab=1000), tokenizer, seed=0)


def test_the_folder_has_no_zero_embedding_row_and_loads_and_trains(folder: Path, policy) -> None:
    config = json.loads((folder / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == (
        "qwen2",
        24,
        256,
    )
    policy, params = policy
    embedding = policy.peft_model("aux").get_input_embeddings().weight
    assert bool(embedding.any(-1).all()), "an all-zero embedding row (the pad token's?)"
    opts = Optimizers.create(policy, ["aux", "main"], False, optimizer_settings(params), total=2)
    stats = update_agents(policy, opts, _rows(policy), update_settings(params), step=0)
    assert 0 < stats["grad_norm/aux"] < float("inf")


def test_a_zero_first_token_embedding_is_reported_with_step_parameter_and_position(policy) -> None:
    """The issue's failure made on purpose: the row of the chat template's first token zeroed."""
    policy, params = policy
    rows = _rows(policy)
    first = rows["aux"][0][0][0]
    with torch.no_grad():
        policy.peft_model("aux").get_input_embeddings().weight[first] = 0.0
    opts = Optimizers.create(policy, ["aux", "main"], False, optimizer_settings(params), total=2)
    with pytest.raises(TrainingFailed) as failed:
        update_agents(policy, opts, rows, update_settings(params), step=3)
    message = str(failed.value)
    assert message.startswith("step 3: non-finite gradient norm for adapter aux")
    assert "first parameter with a non-finite gradient: base_model.model.model.layers." in message
    assert ".lora_" in message and ".aux." in message
    assert "row 0 of 2: non-finite gradient first at token position 0 (prompt; id" in message
    assert "embedding row is all zeros" in message
