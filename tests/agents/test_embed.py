"""State embeddings from the frozen base (orchestry/agents/lora/embed.py), on the embedded model."""

import pytest
import torch
from conftest import cpu_params

from orchestry.agents.lora.embed import mean_hidden_states

pytestmark = pytest.mark.slow  # the embedded model loads: the slow tier


@pytest.fixture(scope="module")
def policy():
    from orchestry.stages.from_params import make_policy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield make_policy(cpu_params())
    torch.set_num_threads(threads)


def test_embeddings_are_per_text_and_ignore_the_adapters(policy):
    texts = ["def aux(x): return x + 1", "Write a story about a lighthouse keeper."]
    both = mean_hidden_states(policy, "main", texts, 64)
    hidden = policy.peft_model("main").config.hidden_size
    assert both.shape == (2, hidden) and both.dtype == torch.float32 and torch.isfinite(both).all()
    alone = mean_hidden_states(policy, "main", texts[1:], 64)
    assert torch.allclose(both[1], alone[0], atol=1e-5)  # no padding: the batch does not matter
    assert not torch.allclose(both[0], both[1])
    # the adapters are off: moving every LoRA weight leaves the embedding where it was
    params = policy.trainable_parameters("main")
    saved = [p.detach().clone() for p in params]
    with torch.no_grad():
        for p in params:
            p.add_(0.5)
    try:
        assert torch.allclose(mean_hidden_states(policy, "main", texts, 64), both, atol=1e-5)
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved, strict=True):
                p.copy_(s)


def test_long_texts_are_cut_to_max_tokens(policy):
    tok = policy.tokenizer("main")
    text = " ".join(f"word{i}" for i in range(200))
    ids = tok(text, add_special_tokens=False)["input_ids"]
    prefix = tok.decode(ids[:16])
    cut = mean_hidden_states(policy, "main", [text, prefix], 16)
    assert torch.allclose(cut[0], cut[1], atol=1e-4)
    with pytest.raises(ValueError, match="at least one text"):
        mean_hidden_states(policy, "main", [], 16)
