"""HeadSampler (orchestry/agents/lora/head_sampler.py) against transformers' warpers, and the shared-prefix
prefill (orchestry/agents/lora/kv_prefix.py) against prefilling every row in full."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, TopKLogitsWarper, TopPLogitsWarper

from orchestry.agents.lora.cuda.triton_sampler import BITS, passes
from orchestry.agents.lora.head_sampler import HeadSampler
from orchestry.agents.lora.kv_prefix import (
    GrowingCache,
    distinct_prompts,
    pad_rows,
    plan_prefixes,
    positions,
)


def _scores(peak: float, rows: int = 16, vocab: int = 49152) -> torch.Tensor:
    generator = torch.Generator().manual_seed(int(peak))
    scores = torch.randn(rows, vocab, generator=generator) * 2
    scores[:, :50] += peak * torch.rand(rows, 50, generator=generator)
    return scores


@pytest.mark.parametrize("peak", [0.0, 8.0, 20.0])  # flat logits take the full-sort branch
def test_candidates_are_what_transformers_top_p_keeps(peak: float) -> None:
    scores = _scores(peak)
    probs = scores.double().softmax(-1)
    for top_p in (0.5, 0.9, 0.95):
        expected = torch.isfinite(TopPLogitsWarper(top_p)(None, scores.clone()))
        index, weights = HeadSampler(1.0, 0, top_p).candidates(scores)
        kept = torch.zeros_like(expected).scatter_(-1, index, weights > 0)
        # Both round in float32 (in different orders): they may disagree only on a token whose
        # ranked-above mass is top_p up to rounding.
        for row, token in (kept != expected).nonzero().tolist():
            above = probs[row][probs[row] > probs[row, token]].sum().item()
            assert abs(above - top_p) < 1e-5, (row, token, above)
        assert (kept != expected).sum() <= 1


def test_temperature_and_top_k_renormalise_like_transformers() -> None:
    scores = _scores(8.0, rows=4)
    sampler = HeadSampler(0.7, 40, 0.9)
    index, weights = sampler.candidates(scores)
    warped = TopKLogitsWarper(40)(None, scores.clone() / 0.7)
    expected = warped.softmax(-1)  # top-k renormalised
    got = torch.zeros_like(expected).scatter_(-1, index, weights)
    kept = got > 0
    torch.testing.assert_close(got[kept], expected[kept], rtol=1e-5, atol=1e-7)
    assert bool((got.sum(-1) >= 0.9).all())  # each row keeps at least top_p of the mass
    assert bool((kept.sum(-1) <= 40).all())


def test_draws_follow_the_nucleus_distribution() -> None:
    torch.manual_seed(0)
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0, -8.0]]).repeat(20000, 1)
    out = HeadSampler(1.0, 0, 0.9, head=4)(None, logits)
    assert bool((torch.isfinite(out).sum(-1) == 1).all())
    drawn = out.argmax(-1)
    p = logits[0].softmax(-1)
    keep = (p.cumsum(-1) - p) < 0.9  # tokens 0..2 hold 0.90 of the mass before token 3
    expected = torch.where(keep, p, 0) / p[keep].sum()
    freq = torch.bincount(drawn, minlength=6).float() / len(drawn)
    torch.testing.assert_close(freq, expected, atol=0.01, rtol=0)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="top_p"):
        HeadSampler(1.0, 0, 0.0)


def test_plan_groups_identical_prompts_and_shared_prefixes() -> None:
    a = list(range(100, 140))
    b = list(range(200, 250))
    rows = [a, a, b, a, b + [7, 8], b + [9]]
    plan = plan_prefixes(rows, ["x", "x", "x", "x", "x", "x"], decode_steps=8)
    for row, g, rest in zip(rows, plan.group, plan.rests, strict=True):
        assert plan.prefixes[g] + rest == row and rest
    assert len(plan.prefixes) == 2  # the three copies of a, and b with its continuations
    assert plan.cost(8) < len(rows) * max(map(len, rows)) * (1 + 8 / 128)
    other = plan_prefixes(rows, ["x", "y", "x", "y", "x", "x"], decode_steps=8)
    assert len({other.prefix_adapters[g] for g in other.group}) == 2
    for j, g in enumerate(other.group):  # a group never mixes adapters
        assert other.prefix_adapters[g] == ["x", "y", "x", "y", "x", "x"][j]


def test_distinct_prompts_are_keyed_by_prompt_and_adapter_in_first_seen_order() -> None:
    """Decoding's prefill and the update's prompt pass run each (prompt, adapter) pair once: the
    same prompt asked of two adapters is two pairs, repeats of a pair one."""
    prompts = [[1, 2], [1, 2], [3], [1, 2], [3]]
    pairs, first, of = distinct_prompts(prompts, [0, 0, 0, 1, 0])
    assert pairs == [((1, 2), 0), ((3,), 0), ((1, 2), 1)]
    assert first == [0, 2, 3]
    assert of == [0, 0, 1, 2, 1]
    assert [pairs[u][0] for u in of] == [tuple(p) for p in prompts]


@pytest.mark.parametrize("ways, expected", [(2, 30), (4, 15), (8, 10), (16, 8), (32, 6)])
def test_the_nucleus_passes_narrow_the_bit_interval_to_one_value(ways: int, expected: int) -> None:
    """Each pass ceil-divides the interval's width by `ways`: the fewest passes with
    ways ** passes >= 2 ** 30 leave one value; one pass fewer would not."""
    n = passes(ways)
    assert n == expected
    width = 2**BITS
    for _ in range(n):
        width = -(-width // ways)
    assert width == 1 and ways ** (n - 1) < 2**BITS


def test_growing_cache_equals_concatenation() -> None:
    torch.manual_seed(0)
    grow, cat = GrowingCache(reserve=2), DynamicCache()
    for step in range(6):
        k, v = torch.randn(3, 2, step + 1, 4), torch.randn(3, 2, step + 1, 4)
        gk, gv = grow.update(k, v, 0)
        ck, cv = cat.update(k, v, 0)
        assert torch.equal(gk, ck) and torch.equal(gv, cv)
        if step == 2:
            index = torch.tensor([2, 0, 0])
            grow.batch_select_indices(index)
            cat.batch_select_indices(index)


def test_positions_skip_padding() -> None:
    _, mask = pad_rows([[5, 6, 7], [8]], 4, 0, torch.device("cpu"))
    mask = torch.cat([mask, torch.tensor([[0, 1], [1, 1]])], dim=1)  # padding in the middle
    assert positions(mask).tolist() == [[1, 0, 1, 2, 1, 3], [1, 1, 1, 0, 1, 2]]
