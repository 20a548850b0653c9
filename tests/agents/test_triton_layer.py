"""The decode step's LoRA expand-and-add and RMSNorm kernels (orchestry/agents/lora/cuda/triton_layer.py),
and the decoder's projection that uses them (`fused.Fused` on a GPU), against torch's forms."""

from __future__ import annotations

import pytest
import torch
from conftest import lora, model_spec

from orchestry.agents.lora.cuda import triton_layer
from orchestry.agents.lora.cuda.fused import Fused
from orchestry.agents.lora.team import TeamPolicy

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="Triton kernels of the GPU's decode step"
)


def projection(rows: int, n: int, ranks: int, dtype: torch.dtype, residual: bool):
    """A projection's pieces: x, W, A, B, a 0/1 mask of two adapters' rank blocks, a residual."""
    gen = torch.Generator().manual_seed(rows + n)
    x = torch.randn((rows, 256), generator=gen)
    w = torch.randn((n, 256), generator=gen) * 0.05
    a = torch.randn((ranks, 256), generator=gen) * 0.05
    b = torch.randn((n, ranks), generator=gen) * 0.05
    owner = torch.arange(ranks) // (ranks // 2)
    mask = (torch.randint(0, 2, (rows,), generator=gen)[:, None] == owner[None, :]).float()
    r = torch.randn((rows, n), generator=gen) if residual else None
    return [t if t is None else t.to("cuda", dtype) for t in (x, w, a, b, mask, r)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows, n, ranks, residual", [(128, 2560, 96, False), (40, 300, 32, True)])
def test_the_lora_expand_kernel_adds_as_the_two_gemm_form_does(
    dtype: torch.dtype, rows: int, n: int, ranks: int, residual: bool
) -> None:
    """y[:, :n] + (y[:, n:] * mask) B^T (+ residual) from the wide GEMM's output, against torch's
    form (`residual + x W^T`, then `+ ((x A^T) * mask) B^T`, two GEMMs), both against float64: the
    kernel's error within twice torch's plus an ulp of the largest value. Sizes that are no
    multiple of the kernel's blocks: its edges are masked."""
    x, w, a, b, mask, r = projection(rows, n, ranks, dtype, residual)
    wide = torch.nn.functional.linear(x, torch.cat([w, a]))
    exact = x.double() @ w.double().t() + ((x.double() @ a.double().t()) * mask.double()) @ (
        b.double().t()
    )
    torch_form = x @ w.t() if r is None else torch.addmm(r, x, w.t())
    torch_form = torch.addmm(torch_form, (x @ a.t()) * mask, b.t())
    if r is not None:
        exact += r.double()
    got = triton_layer.lora_expand(wide, n, mask, b, None if r is None else r.clone())
    error = (got.double() - exact).abs().max().item()
    torch_error = (torch_form.double() - exact).abs().max().item()
    ulp = torch.finfo(dtype).eps * exact.abs().max().item()
    assert error <= 2 * torch_error + ulp, (error, torch_error)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("width", [2048, 576])
def test_the_rms_norm_kernel_is_torchs(dtype: torch.dtype, width: int) -> None:
    """torch.nn.functional.rms_norm on the GPU (one rounding, from float32): equal but for the
    sum's order and the reciprocal square root's own rounding: within an ulp of the dtype in
    bfloat16, and equal in nearly every entry; within 4 in float32, where those roundings show
    (an H200 run at a 1-ulp bound failed on entries 1.4 ulps apart)."""
    gen = torch.Generator().manual_seed(width)
    h = (torch.randn((128, width), generator=gen) * 3).to("cuda", dtype)
    weight = torch.randn(width, generator=gen).to("cuda", dtype)
    expected = torch.nn.functional.rms_norm(h, (width,), weight, 1e-6)
    got = triton_layer.rms_norm(h, weight, 1e-6)
    ulps = 1 if dtype == torch.bfloat16 else 4
    ulp = expected.float().abs() * torch.finfo(dtype).eps
    assert ((got.float() - expected.float()).abs() <= ulps * ulp + 1e-30).all()
    if dtype == torch.bfloat16:
        assert (got == expected).float().mean() > 0.98


def test_a_decode_projection_on_the_gpu_is_the_two_gemm_form() -> None:
    """`Fused` on a GPU runs a decode step's q/k/v and o through the wide GEMM and `lora_expand`;
    with rows named (the prefill) it runs torch's two-GEMM form. Both give the same projection of
    the same rows, each row through its own adapter, up to rounding (float32 here)."""
    spec = model_spec(device="cuda", dtype="float32")
    policy = TeamPolicy(spec, ("aux", "main"), lora(r=4, alpha=8), seed=0)
    layer = policy.peft_model("aux").get_base_model().model.layers[0].self_attn
    for part in ("aux", "main"):  # adapters that moved: B is zero at initialisation
        for m in (layer.q_proj, layer.k_proj, layer.v_proj, layer.o_proj):
            torch.nn.init.normal_(m.lora_B[part].weight, std=0.05)
    rows = 24
    adapter = torch.tensor([0, 1] * (rows // 2), device="cuda")
    x = torch.randn((rows, layer.q_proj.in_features), device="cuda")
    for modules, residual in (
        ([layer.q_proj, layer.k_proj, layer.v_proj], None),
        ([layer.o_proj], torch.randn((rows, layer.o_proj.out_features), device="cuda")),
    ):
        fused = Fused(modules, ["aux", "main"], rows)
        fused.refresh(adapter)
        assert fused.kernels
        every = torch.arange(rows, device="cuda")
        slow = fused(x, None if residual is None else residual.clone(), rows=every)
        fast = fused(x, None if residual is None else residual.clone())
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
        frozen = torch.nn.functional.linear(x, fused.weight, fused.bias)
        frozen = frozen if residual is None else frozen + residual
        assert (fast - frozen).abs().max() > 1e-3  # the adapters' terms are in it
