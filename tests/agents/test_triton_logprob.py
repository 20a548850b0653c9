"""The update's log-prob kernels (orchestry/agents/lora/cuda/triton_logprob.py) against torch's form
(`kv_prefix.target_logprobs`: `logits.float()`, `gather`, `logsumexp`) and autograd's backward of it."""

from __future__ import annotations

import pytest
import torch

from orchestry.agents.lora.cuda.triton_logprob import token_logprobs
from orchestry.agents.lora.kv_prefix import target_logprobs

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="Triton kernels of the GPU's update"
)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape, vocab", [((4, 96), 151_936), ((3, 7), 1_000)])
def test_the_log_prob_kernels_are_torchs_form(
    dtype: torch.dtype, shape: tuple[int, int], vocab: int
) -> None:
    """Log-probs and the logits' gradient equal torch's form up to float32 summation order: the
    log-probs within 2e-5 (vocabularies that are and are not multiples of the kernel's block); the
    gradient g * (onehot - p) within one rounding of its dtype plus that 2e-5 in the log-sum-exp
    (p moves by p times it), at every entry and at the target's."""
    gen = torch.Generator(device="cuda").manual_seed(vocab)
    logits = (torch.randn((*shape, vocab), generator=gen, device="cuda") * 4).to(dtype)
    targets = torch.randint(0, vocab, shape, generator=gen, device="cuda")
    weight = torch.randn(shape, generator=gen, device="cuda")

    mine = logits.clone().requires_grad_(True)
    got = token_logprobs(mine, targets)
    (got * weight).sum().backward()

    theirs = logits.clone().requires_grad_(True)
    want = target_logprobs(theirs, targets)  # torch's form, the CPU path's
    (want * weight).sum().backward()

    assert got.dtype == torch.float32 and got.shape == shape
    assert (got - want).abs().max().item() <= 2e-5
    assert mine.grad.dtype == dtype
    scale = (torch.finfo(dtype).eps + 2e-5) * weight.abs().max().item()
    assert (mine.grad.float() - theirs.grad.float()).abs().max().item() <= scale
    at_target = mine.grad.gather(-1, targets.unsqueeze(-1)).float()
    assert torch.allclose(
        at_target, theirs.grad.gather(-1, targets.unsqueeze(-1)).float(), atol=scale
    )
