"""Our own decode loop (orchestry/agents/lora/cuda/graph_decode.py), run eagerly on the CPU.

On a GPU the same step is replayed as a CUDA graph; tests/agents/test_policy.py checks greedy
completions against the eager path, these check the sampling and the lengths.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from conftest import lora, model_spec, sampling

from orchestry.agents.base import GenRequest
from orchestry.agents.lora.cuda import triton_decode, triton_rotary, triton_support
from orchestry.agents.lora.cuda.device_sampler import draw, nucleus_floor, torch_nucleus_floor
from orchestry.agents.lora.cuda.fused import rotate
from orchestry.agents.lora.cuda.graph_decode import (
    PROMPT_BUCKET,
    ROW_BUCKET,
    GraphDecoder,
    decode_shape,
    supports,
)
from orchestry.agents.lora.team import TeamPolicy

pytestmark = pytest.mark.slow  # a real model trains or generates in every test here

PROMPT = [{"role": "user", "content": "Name one colour."}]


@pytest.fixture(scope="module")
def policy() -> Iterator[TeamPolicy]:
    yield TeamPolicy(model_spec(), ("aux", "main"), lora(r=4, alpha=8), seed=0)


def nucleus(probs: torch.Tensor, top_p: float) -> dict[int, float]:
    """transformers' top-p rule: keep a token while the mass ranked above it is < top_p."""
    values, index = probs.sort(descending=True)
    keep = (values.cumsum(0) - values) < top_p
    kept = values[keep] / values[keep].sum()
    return dict(zip(index[keep].tolist(), kept.tolist(), strict=True))


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def on(device: str) -> str:
    """`device`, and on a GPU the Triton kernels it must sample with (triton_sampler.py)."""
    if device == "cuda":
        assert triton_support.triton is not None, "Triton is missing: the GPU would sample in torch"
    return device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("top_k, top_p", [(0, 0.9), (3, 1.0), (4, 0.8), (0, 1.0)])
def test_draw_follows_the_top_k_top_p_distribution(top_k: int, top_p: float, device: str) -> None:
    n, temperature = 20_000, 0.7
    logits = torch.tensor([[2.0, 1.5, 1.4, 0.3, 0.2, -1.0, -3.0, 0.9]]).repeat(n, 1)
    uniform = torch.rand(n, generator=torch.Generator().manual_seed(0))
    tokens = draw(logits.to(on(device)), uniform.to(device), temperature, top_k, top_p).cpu()
    scaled = logits[0] / temperature
    if top_k:
        scaled = scaled.masked_fill(scaled < scaled.topk(top_k).values[-1], -math.inf)
    expected = nucleus(scaled.softmax(-1), top_p)
    counts = Counter(tokens.tolist())
    assert set(counts) <= set(expected), "a token outside the kept set was drawn"
    for token, p in expected.items():  # within 4.5 standard deviations of the binomial
        assert abs(counts[token] / n - p) < 4.5 * (p * (1 - p) / n) ** 0.5 + 1e-9, (token, p)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95, 0.999])
def test_the_nucleus_floor_keeps_transformers_top_p_set(top_p: float, device: str) -> None:
    """Peaked and flat rows (a trained model's and a random model's): the tokens at or above the
    floor are those transformers' sorted rule keeps (random values: no ties), summed exactly; a
    float32 sum may move the edge only by a token whose ranked mass is within 1e-5 of top_p. On a
    GPU the floor comes from the Triton kernels (a vocabulary of several chunks, not a multiple of
    one)."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn((64, 20_000), generator=gen) * torch.linspace(0.05, 8.0, 64)[:, None]
    probs = logits.softmax(-1)
    kept = (probs.to(on(device)) >= nucleus_floor(probs.to(device), top_p)).cpu()
    exact = 0
    for row, keep in zip(probs, kept, strict=True):
        values, index = row.double().sort(descending=True)
        above = values.cumsum(0) - values  # the mass ranked above each token
        rule = set(index[above < top_p].tolist())
        got = set(keep.nonzero().flatten().tolist())
        edge = set(index[(above - top_p).abs() < 1e-5].tolist())
        assert got ^ rule <= edge, sorted(got ^ rule)
        exact += got == rule
    assert exact >= 60


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("top_p", [0.9, 1.0])
def test_draw_picks_the_token_the_sorted_nucleus_and_cumsum_pick(top_p: float, device: str) -> None:
    """Each row's token is the first whose running sum over the kept tokens, in vocabulary order,
    exceeds uniform x their total (torch's cumsum, the CPU form, as the reference). On a GPU the
    kernels' sums run in another order: a row may differ only where the target is within float
    rounding of a running sum."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn((256, 20_000), generator=gen) * torch.linspace(0.05, 8.0, 256)[:, None]
    uniform = torch.rand(256, generator=gen)
    got = draw(logits.to(on(device)), uniform.to(device), 1.0, 0, top_p).cpu()
    probs = logits.softmax(-1).double()
    kept = (
        probs * (probs >= torch_nucleus_floor(probs.float(), top_p).double())
        if top_p < 1
        else probs
    )
    total = kept.cumsum(-1)
    target = uniform.double()[:, None] * total[:, -1:]
    expected = (total <= target).sum(-1)
    near = (total - target).abs().min(-1).values < 1e-6
    assert ((got == expected) | near).all(), (got[got != expected], expected[got != expected])
    assert (got == expected).float().mean() > 0.98
    assert kept.gather(1, got[:, None]).gt(0).all(), "a token outside the nucleus was drawn"


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a Triton kernel of the GPU's decode step"
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_rotary_kernel_turns_and_writes_as_the_torch_step_does(dtype: torch.dtype) -> None:
    """Queries turned and keys turned into the cache column as the torch form turns them
    (`fused.rotate`, then `index_copy_`; to the dtype's rounding: the kernel may fuse a product into
    the sum), values copied bit for bit, other columns untouched."""
    assert triton_rotary.available(128)
    gen = torch.Generator().manual_seed(0)
    heads, kv, d, rows, width = 16, 2, 128, 24, 40
    y = torch.randn((rows, 1, heads + 2 * kv, d), generator=gen).to("cuda", dtype)
    cos, sin = (torch.randn((rows, 1, d), generator=gen).to("cuda", dtype) for _ in range(2))
    cache = torch.randn((2, rows, kv, width, d), generator=gen).to("cuda", dtype)
    expected, column = cache.clone(), torch.tensor([29], device="cuda")
    q = triton_rotary.rotary_into_cache(y[:, 0], cos[:, 0], sin[:, 0], cache, column, heads, kv)
    qk = rotate(y[:, :, : heads + kv], cos[:, :, None], sin[:, :, None])
    expected[0].index_copy_(2, column, qk[:, :, heads:].transpose(1, 2))
    expected[1].index_copy_(2, column, y[:, :, heads + kv :].transpose(1, 2))
    # a product fused into the sum skips one rounding: within one unit of the products' size
    half = d // 2
    turned = torch.cat((-y[..., half:], y[..., :half]), -1)[:, 0, : heads + kv].float()
    size = (
        y[:, 0, : heads + kv].float().abs() * cos.float().abs() + turned.abs() * sin.float().abs()
    )
    bound = size * torch.finfo(dtype).eps
    got = torch.cat((q, cache[0][:, :, 29]), 1).float()
    assert ((got - qk[:, 0].float()).abs() <= bound).all()
    assert (got == qk[:, 0].float()).float().mean() > 0.5  # H200: 0.75 equal, both dtypes
    assert torch.equal(cache[1], expected[1])
    untouched = torch.ones(width, dtype=torch.bool)
    untouched[29] = False
    assert torch.equal(cache[0][:, :, untouched], expected[0][:, :, untouched])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a Triton kernel of the GPU's sampler")
def test_a_row_of_nan_draws_token_0_as_the_torch_form_does() -> None:
    """No chunk of an all-NaN row claims the pick: the token must be 0, not what memory held."""
    logits = torch.randn((4, 20_000), generator=torch.Generator().manual_seed(0))
    logits[2] = math.nan
    uniform = torch.full((4,), 0.5)
    for top_p in (0.9, 1.0):
        # freed small blocks full of 12345, which the output's block would be one of
        dirty = [torch.full((64,), 12345, dtype=torch.int64, device="cuda") for _ in range(32)]
        del dirty
        got = draw(logits.to(on("cuda")), uniform.to("cuda"), 1.0, 0, top_p).cpu()
        assert got[2] == 0 == draw(logits, uniform, 1.0, 0, top_p)[2]


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a Triton kernel of the GPU's decode step"
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("heads, kv, d", [(16, 2, 128), (9, 3, 64)])
def test_the_decode_attention_kernel_attends_as_sdpa_does(
    dtype: torch.dtype, heads: int, kv: int, d: int
) -> None:
    """The kernel's output against torch's SDPA with the decode step's mask (real columns up to the
    one written this step), both against float64. Columns after it and padding columns hold NaN:
    the kernel must not read them (SDPA would spread the NaN: it is left out of its inputs)."""
    gen = torch.Generator().manual_seed(0)
    rows, width, column = 24, 300, 201
    q = torch.randn((rows, heads, d), generator=gen).to("cuda", dtype)
    cache = torch.randn((2, rows, kv, width, d), generator=gen).to("cuda", dtype)
    real = torch.rand((rows, width), generator=gen).to("cuda") > 0.2
    real[:, column] = True
    seen = real & (torch.arange(width, device="cuda") <= column)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(rows, kv, heads // kv, d).double(),
        *cache.double().where(seen[None, :, None, :, None], 0.0),
        attn_mask=seen[:, None, None, :],
        scale=d**-0.5,
    ).reshape(rows, heads, d)
    torch_form = torch.nn.functional.scaled_dot_product_attention(
        q.reshape(rows, kv, heads // kv, d),
        cache[0],
        cache[1],
        attn_mask=seen[:, None, None, :],
        scale=d**-0.5,
    ).reshape(rows, heads, d)
    cache.masked_fill_(~seen[None, :, None, :, None], math.nan)
    got = triton_decode.decode_attention(
        q, cache, real, torch.tensor([column], device="cuda"), d**-0.5
    )
    error = (got.double() - expected).abs().max().item()
    torch_error = (torch_form.double() - expected).abs().max().item()
    size = expected.abs().max().item()
    assert error <= 2 * torch_error + 4 * torch.finfo(dtype).eps * size, (error, torch_error)


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a Triton kernel of the GPU's decode step"
)
def test_the_gated_activation_kernel_rounds_as_torch_does() -> None:
    """silu(gate) * up as torch computes it in bfloat16 (each op rounded to bfloat16), up to one
    unit in the last place where the exponentials differ."""
    y = torch.randn((128, 2 * 11008), generator=torch.Generator().manual_seed(0)) * 4
    y = y.to("cuda", torch.bfloat16)
    gate, up = y.chunk(2, dim=-1)
    expected = torch.nn.functional.silu(gate) * up
    got = triton_decode.silu_mul(y)
    ulp = expected.float().abs() * torch.finfo(torch.bfloat16).eps
    assert ((got.float() - expected.float()).abs() <= ulp + 1e-30).all()
    assert (got == expected).float().mean() > 0.99


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a Triton kernel of the GPU's update")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_gated_activation_backward_is_torchs(dtype: torch.dtype) -> None:
    """The update's `GatedSilu`: the gradient of both halves of the gate/up output, against
    torch's autograd of `silu(gate) * up`: its error against float64 is within twice torch's
    plus an ulp of the largest gradient (a width that is not a multiple of the kernel's block:
    the last block is masked)."""
    generator = torch.Generator().manual_seed(0)
    y = (torch.randn((64, 2 * 1100), generator=generator) * 4).to("cuda", dtype)
    grad = torch.randn((64, 1100), generator=generator).to("cuda", dtype)
    grads = []
    for form in ("ours", "torch", "float64"):
        x = (y.double() if form == "float64" else y.clone()).requires_grad_()
        if form == "ours":
            out = triton_decode.GatedSilu.apply(x)
        else:
            gate, up = x.chunk(2, dim=-1)
            out = torch.nn.functional.silu(gate) * up
        out.backward(grad.to(out.dtype))
        grads.append(x.grad.double())
    ours, theirs, exact = grads
    error, torch_error = (ours - exact).abs().max(), (theirs - exact).abs().max()
    size = exact.abs().max()
    assert error <= 2 * torch_error + torch.finfo(dtype).eps * size, (error, torch_error)
    assert torch.equal(triton_decode.GatedSilu.apply(y), triton_decode.silu_mul(y))


def test_min_new_tokens_holds_and_same_call_same_samples(policy: TeamPolicy) -> None:
    spec = sampling(max_new_tokens=10, min_new_tokens=10, temperature=1.0, top_p=0.95, top_k=8)
    requests = [GenRequest(a, PROMPT, 2) for a in ("aux", "main")]
    calls = policy.generate_calls
    first = policy.generate(requests, spec, path="graph")
    assert all(len(ids) == 10 for g in first for ids in g.token_ids)
    policy.generate_calls = calls  # the same call of the same seed: the same samples
    assert [g.token_ids for g in policy.generate(requests, spec, path="graph")] == [
        g.token_ids for g in first
    ]


def test_min_new_bans_only_the_stop_tokens_until_it_is_reached(policy: TeamPolicy) -> None:
    """Greedy decoding with its own first token made the stop token: with min_new 0 the row stops
    at once; with min_new 3 the decoder bans that token's column (`GraphDecoder._choose` writes
    -inf into the stop tokens' columns only) until column 3, so the row is the greedy row of
    that token banned; and a second stop token that never wins changes nothing."""
    model, pad = policy.peft_model("aux"), policy.tokenizer("aux").pad_token_id
    prompt = [[1, 504, 2638, 314, 28, 3150, 30]]

    def run(min_new: int, stops: set[int]) -> list[int]:
        spec = sampling(max_new_tokens=6, min_new_tokens=min_new, do_sample=False)
        decoder = GraphDecoder(model, ("aux", "main"), decode_shape(prompt, spec))
        return decoder.run(prompt, [0], pad, stops)[0]

    free = run(0, set())
    stop = free[0]
    assert run(0, {stop}) == [stop] + [pad] * 5
    held = run(3, {stop})
    assert stop not in held[:3] and pad not in held[:3]
    assert held[0] != stop and len(held) == 6
    other = next(t for t in range(10, 100) if t not in free and t not in held)
    assert run(3, {stop, other}) == held


def test_shapes_are_bucketed_and_the_embedded_model_is_supported(policy: TeamPolicy) -> None:
    shape = decode_shape([[1] * 70, [1] * 3], sampling(max_new_tokens=32))
    assert (shape.rows, shape.width) == (ROW_BUCKET, 2 * PROMPT_BUCKET)
    assert supports(policy.peft_model("aux"))
    decoder = GraphDecoder(policy.peft_model("aux"), ("aux", "main"), shape)
    # the GPU's decode step runs every Triton kernel (the activation's test once missed SiLU)
    assert triton_decode.names_silu(policy.peft_model("aux").get_base_model().config)
    on_gpu = triton_support.usable(decoder.embed.weight)
    assert decoder.fused_attention == decoder.fused_act == on_gpu


def test_a_call_that_does_not_fit_the_buffers_is_a_python_error(policy: TeamPolicy) -> None:
    """Issue 56: on a GPU an index out of bounds is a device-side assert that ends the process.
    The decoder checks a call against its buffers on the host first and names the sizes."""
    shape = decode_shape([[1] * 70], sampling(max_new_tokens=4))
    decoder = GraphDecoder(policy.peft_model("aux"), ("aux", "main"), shape)
    vocab = decoder.embed.weight.shape[0]
    calls = {
        "prompts of up to 200 tokens": ([[1] * 200], [0], 0, {2}),
        f"token ids 0..{vocab} for {vocab}": ([[1, vocab]], [0], 0, {2}),
        f"token ids -1..2 for {vocab}": ([[1, 2]], [0], -1, {2}),
        "adapter indices 0..2 for 2 adapters": ([[1], [1]], [0, 2], 0, {2}),
        f"17 rows for {ROW_BUCKET}": ([[1]] * 17, [0] * 17, 0, {2}),
    }
    for said, (rows, index, pad, stops) in calls.items():
        with pytest.raises(ValueError, match=said):
            decoder.run(rows, index, pad, stops)
    assert len(decoder.run([[1, 2, 3]], [1], 0, {2})[0]) == 4  # a call that fits still runs
