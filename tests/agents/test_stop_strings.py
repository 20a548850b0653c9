"""Stop strings on the LoRA team (SamplingSpec.stop, what tool calls stop at): a completion and its
token ids end with the first token completing a stop string, so the update trains on exactly the
tokens kept. The embedded model on CPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from conftest import MODEL_CACHE, lora, model_spec, sampling

from orchestry.agents.base import GenRequest
from orchestry.agents.lora.generation import _cut_at_string
from orchestry.agents.lora.team import TeamPolicy

pytestmark = pytest.mark.slow  # a real model generates


@pytest.fixture(scope="module")
def policy() -> Iterator[TeamPolicy]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield TeamPolicy(model_spec(cache_dir=str(MODEL_CACHE)), ("aux",), lora(r=8, alpha=16), seed=0)
    torch.set_num_threads(threads)


def test_ids_are_cut_at_the_token_completing_the_stop_string(policy: TeamPolicy):
    tokenizer = policy.tokenizer("aux")
    text = 'def f():\n    pass\n<tool name="examples"></tool>\nand then more text'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    cut = _cut_at_string(ids, ("</tool>",), tokenizer)
    kept = tokenizer.decode(cut)
    assert "</tool>" in kept and "</tool>" not in tokenizer.decode(cut[:-1])
    assert "more text" not in kept
    assert _cut_at_string(ids, ("<never>",), tokenizer) == ids


def test_generated_completions_stop_at_the_first_stop_string(policy: TeamPolicy):
    request = GenRequest("aux", [{"role": "user", "content": "Write a sentence about trees."}], 4)
    spec = sampling(max_new_tokens=16, temperature=1.0, top_p=1.0, top_k=0)
    free = policy.generate([request], spec)[0]
    policy_again = TeamPolicy(
        model_spec(cache_dir=str(MODEL_CACHE)), ("aux",), lora(r=8, alpha=16), seed=0
    )
    stopped = policy_again.generate([request], sampling(**{**vars(spec), "stop": ("e",)}))[0]
    tokenizer = policy.tokenizer("aux")
    for whole, ids, text in zip(free.token_ids, stopped.token_ids, stopped.texts, strict=True):
        assert ids == whole[: len(ids)]  # the same sample, cut
        assert text == tokenizer.decode(ids, skip_special_tokens=True)
        if "e" in tokenizer.decode(whole, skip_special_tokens=True):
            assert text.count("e") >= 1 and "e" not in tokenizer.decode(ids[:-1])
    assert stopped.new_tokens == sum(map(len, stopped.token_ids)) < free.new_tokens
