"""The GPU sampler's Triton kernels (orchestry/agents/lora/cuda/triton_sampler.py) against torch: the
softmax from the head's logits, and the floor and pick of every tuning against the default's.
`draw` through them is checked against the torch form in tests/agents/test_graph_decode.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from orchestry.agents.lora.cuda import triton_sampler
from orchestry.agents.lora.cuda.device_sampler import draw, torch_nucleus_floor

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a Triton kernel of the GPU's sampler"
)

VOCAB = 3 * triton_sampler.CHUNK + 1234  # the last chunk is a partial one


def _logits(rows: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Flat to peaked rows; row 0 all -inf but its last entry (in the partial chunk)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn((rows, VOCAB), generator=gen) * torch.linspace(0.05, 12.0, rows)[:, None]
    logits[0] = -math.inf
    logits[0, -1] = 2.0
    return logits.to("cuda", dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_the_softmax_kernel_is_torchs_up_to_the_sums_order(
    dtype: torch.dtype, temperature: float
) -> None:
    """softmax(logits.float() / t) as torch computes it on the GPU: the same exponentials, one
    divisor a row summed in another order, so within torch's own error against float64 plus a few
    units; subnormal results may be flushed to zero. A row of -inf but one entry is exactly
    one-hot."""
    logits = _logits(32, dtype)
    got = triton_sampler.softmax(logits, temperature)
    torch_form = torch.softmax(logits.float() / temperature, -1)
    scaled = logits.float() / temperature  # torch's rounding of the division, then float64 on
    exact = torch.softmax(scaled.double(), -1)
    normal = exact > torch.finfo(torch.float32).tiny
    error = ((got.double() - exact).abs() / exact)[normal].max().item()
    torch_error = ((torch_form.double() - exact).abs() / exact)[normal].max().item()
    assert error <= torch_error + 8 * torch.finfo(torch.float32).eps, (error, torch_error)
    assert (got[~normal] <= 2 * torch.finfo(torch.float32).tiny).all()
    one_hot = torch.zeros(VOCAB, device="cuda")
    one_hot[-1] = 1.0
    assert torch.equal(got[0], one_hot)


def test_a_row_of_nan_is_nan_and_draws_token_0() -> None:
    """As torch's softmax, a NaN logit makes its row NaN; the pick then takes token 0 (the torch
    form's), from the fused kernels as from the unfused ones."""
    logits = _logits(4, torch.bfloat16)
    logits[2, 5] = math.nan
    probs = triton_sampler.softmax(logits, 1.0)
    assert probs[2].isnan().all() and not probs[[0, 1, 3]].isnan().any()
    uniform = torch.full((4,), 0.5, device="cuda")
    for top_p in (0.9, 1.0):
        for fused in (True, False):
            out = triton_sampler.sample(logits, uniform, 1.0, top_p, fused=fused)
            assert out[2] == 0


@pytest.mark.parametrize("top_p", [0.5, 0.95, 0.999, 1.0])
def test_every_tuning_finds_the_floor_and_token_of_the_default(top_p: float) -> None:
    """The floor is torch_nucleus_floor's up to float32 sums in another order (a token whose
    ranked mass is top_p within rounding). Ways, loads and the fused first pass change no sum: a
    threshold's mass is the same adds in the same order whichever pass tests it, so the floor and
    the token are the default's. Warps and chunk reorder the sums: they may move a row whose mass
    or pick target lies within rounding of an edge. The head's bfloat16 draws what its float32
    copy draws."""
    logits = _logits(64, torch.bfloat16, seed=1)
    uniform = torch.rand(64, generator=torch.Generator().manual_seed(2)).cuda()
    probs = torch.softmax(logits.float(), -1)
    floor = triton_sampler.nucleus_floor(probs, top_p)
    want = torch_nucleus_floor(probs, top_p) if top_p < 1 else torch.zeros_like(floor)
    assert (floor == want).float().mean() >= 0.95
    token = triton_sampler.pick(probs, uniform, top_p)
    sampled = triton_sampler.sample(logits, uniform, 1.0, top_p)
    assert torch.equal(sampled, draw(logits, uniform, 1.0, 0, top_p))
    assert torch.equal(sampled, draw(logits.float(), uniform, 1.0, 0, top_p))
    assert (sampled == token).float().mean() >= 0.95  # the softmax's divisor differs from torch's
    assert torch.equal(triton_sampler.sample(logits, uniform, 1.0, top_p, fused=False), sampled)
    for tuning in [{"ways": 4}, {"ways": 16}, {"loads": 1}, {"loads": 4}]:
        assert torch.equal(triton_sampler.nucleus_floor(probs, top_p, **tuning), floor), tuning
        assert torch.equal(triton_sampler.pick(probs, uniform, top_p, **tuning), token), tuning
        got = triton_sampler.sample(logits, uniform, 1.0, top_p, **tuning)
        assert torch.equal(got, sampled), tuning
    for tuning in [{"warps": 8}, {"chunk": 8192, "warps": 4, "loads": 2}, {"chunk": 16384}]:
        same = triton_sampler.nucleus_floor(probs, top_p, **tuning) == floor
        assert same.float().mean() >= 0.95, tuning
        same = triton_sampler.pick(probs, uniform, top_p, **tuning) == token
        assert same.float().mean() >= 0.95, tuning


def test_a_chunk_that_is_no_multiple_of_the_reads_is_refused() -> None:
    probs = torch.softmax(_logits(2, torch.float32), -1)
    with pytest.raises(ValueError, match="chunk"):
        triton_sampler.pick(probs, torch.rand(2, device="cuda"), 0.9, chunk=1000)


def test_a_uniform_next_to_one_picks_the_torch_forms_token() -> None:
    """Issue 56: prompt_policy's evaluation on an H200 died in a device-side assert (the embedding
    of token -1). The row it sampled (SmolLM2's head at T 0.8, top-p 0.95; saved from that run)
    with the largest float32 below 1 as its uniform: the pick's parallel scan of the chunks' kept
    masses gave a chunk without kept mass a share of one float32 unit, that chunk claimed the
    uniform and, holding no kept token, wrote -1. Now the same token as the torch form."""
    saved = torch.load(Path(__file__).parent / "data" / "sampler_row_of_issue_56.pt")
    logits, temperature, top_p = saved["logits"], saved["temperature"], saved["top_p"]
    edge = torch.nextafter(torch.tensor([1.0]), torch.tensor([0.0]))
    want = draw(logits.float(), edge, temperature, 0, top_p)  # the torch form, on the CPU
    assert want.item() == 27735
    for fused in (True, False):
        got = triton_sampler.sample(logits.cuda(), edge.cuda(), temperature, top_p, fused=fused)
        assert got.item() == want.item(), fused
    probs = triton_sampler.softmax(logits.cuda(), temperature)
    assert triton_sampler.pick(probs, edge.cuda(), top_p).item() == want.item()


def test_no_uniform_picks_a_token_outside_the_vocabulary() -> None:
    """Every row of `_logits`, every top-p, uniforms at both ends of [0, 1): a token of the row."""
    logits = _logits(64, torch.bfloat16, seed=3)
    edge = torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)).item()
    for top_p in (0.5, 0.95, 1.0):
        for value in (0.0, edge):
            uniform = torch.full((64,), value, device="cuda")
            out = triton_sampler.sample(logits, uniform, 0.8, top_p)
            assert ((out >= 0) & (out < VOCAB)).all(), (top_p, value, out.min(), out.max())
