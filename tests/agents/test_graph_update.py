"""The update's recorded passes (`agents/lora/cuda/graph_update.py`).

On a GPU a pass is recorded once per shape and replayed: the replay must give what the same pass run
eagerly gives, for new rows of a recorded shape too, and add its gradients to `.grad` of only the
adapters with rows. The model is a small random Llama (no weights to load), so the check runs on any
CUDA machine. The padding itself is checked on the CPU against peft (`test_written_update.py`)."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from orchestry.agents.lora.cuda import graph_update
from orchestry.agents.lora.cuda.graph_update import GraphUpdate, PassShape, pass_shape
from orchestry.algos.magrpo import RowLoss

ADAPTERS = ("aux", "main")


def test_pass_shapes_are_bucketed() -> None:
    prompts = [((1,) * 70, 0), ((2,) * 10, 1), ((3,) * 5, 0)]
    shape = pass_shape(prompts, [[1] * 40, [2] * 3])
    assert shape == PassShape(rows=2, prompts=4, prompt_width=128, completion_width=64)
    assert pass_shape(prompts[:1], [[1]] * 33) == PassShape(64, 1, 128, 32)
    assert pass_shape(prompts[:1], [[1]] * 17).rows == 32


def test_a_small_micro_batch_is_not_padded_to_the_row_bucket() -> None:
    """The 3B shape's planned micro-batch of 16 rows was padded to 32 (twice the work and memory
    the plan counted); fewer rows than half the bucket go to the next power of two."""
    prompts = [((1,) * 70, 0), ((2,) * 10, 1)]
    assert [pass_shape(prompts, [[1]] * n).rows for n in (1, 3, 8, 9, 16)] == [1, 4, 8, 16, 16]


def _model(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
    )
    base = LlamaForCausalLM(config).to("cuda", dtype)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "up_proj"])
    model = get_peft_model(base, lora, adapter_name=ADAPTERS[0])
    model.add_adapter(ADAPTERS[1], lora)
    for name, p in model.named_parameters():
        if ".lora_" in name:
            p.requires_grad_(True)
            p.data = p.data.float()
            with torch.no_grad():
                p.add_(torch.randn_like(p) * 0.05)
    # a backward on the default stream first, as training's other paths may run: the parameters'
    # autograd leaves then hold that stream, and a capture syncing with it fails (found on an H200)
    model(
        input_ids=torch.ones((1, 8), dtype=torch.long, device="cuda")
    ).logits.float().sum().backward()
    for p in model.parameters():
        p.grad = None
    return model


def _params(model: torch.nn.Module) -> dict[str, list[torch.nn.Parameter]]:
    return {
        a: [p for n, p in model.named_parameters() if ".lora_" in n and n.endswith(f".{a}.weight")]
        for a in ADAPTERS
    }


def _rows(seed: int, n: int, agents: list[str]) -> tuple[list, list, list, list, list]:
    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(1, 97, (int(20 + 30 * (k % 3)),), generator=g).tolist() for k in range(4)
    ]
    rows = [prompts[k % 4] for k in range(n)]
    comps = [torch.randint(1, 97, (int(5 + k * 7 % 40),), generator=g).tolist() for k in range(n)]
    adv = torch.randn(n, generator=g).tolist()
    weight = [1.0 / n] * n
    return [agents[k % len(agents)] for k in range(n)], rows, comps, adv, weight


def _run(model, update: GraphUpdate, record: bool, rows) -> tuple[torch.Tensor, dict]:
    params = _params(model)
    for ps in params.values():
        for p in ps:
            p.grad = None
    graph_update.RECORD = record
    try:
        agents, prompts, comps, adv, weight = rows
        losses = update.run(
            model, params, agents, prompts, comps, adv, weight, RowLoss("token_mean"), 0
        )
    finally:
        graph_update.RECORD = True
    grads = {
        a: [None if p.grad is None else p.grad.clone() for p in ps] for a, ps in params.items()
    }
    return losses, grads


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_replayed_pass_equals_the_eager_pass(dtype: torch.dtype) -> None:
    model = _model(dtype)
    recorded, eager = GraphUpdate(), GraphUpdate()
    batches = [
        _rows(0, 20, list(ADAPTERS)),  # recorded here
        _rows(1, 25, list(ADAPTERS)),  # the same shape, new rows: a replay
        _rows(2, 40, ["main"]),  # another shape, one adapter's rows
    ]
    for k, batch in enumerate(batches):
        got, got_grads = _run(model, recorded, True, batch)
        want, want_grads = _run(model, eager, False, batch)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        for a in ADAPTERS:
            if a not in batch[0]:
                assert all(g is None for g in got_grads[a]), (k, a)
                continue
            for x, y in zip(got_grads[a], want_grads[a], strict=True):
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-3)
            assert any(g.abs().sum() > 0 for g in got_grads[a])
    assert len(recorded._passes) == 2 and all(
        p.graph is not None for p in recorded._passes.values()
    )
    assert all(p.graph is None for p in eager._passes.values())
    # the recorded passes ran silu(gate) * up and its backward as Triton kernels (GatedSilu)
    assert recorded._forward is not None and recorded._forward.fused_act


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_team_records_its_update_after_generating(tmp_path) -> None:
    """The embedded model as training runs it: the team generates on its graph path, then the update
    records its pass. Recording through the LoRA parameters' own autograd leaves failed there on an
    H100 ("operation would make the legacy stream depend on a capturing blocking stream")."""
    from conftest import lora, model_spec

    from orchestry.agents.base import GenRequest, SamplingSpec
    from orchestry.agents.lora.base_model import (
        EMBEDDED_MODEL,
        embedded_gguf_path,
        load_gguf_model,
        save_plain_model,
    )
    from orchestry.agents.lora.team import TeamPolicy

    save_plain_model(*load_gguf_model(embedded_gguf_path()), tmp_path / EMBEDDED_MODEL)
    spec = model_spec(cache_dir=str(tmp_path), device="cuda", dtype="bfloat16")
    policy = TeamPolicy(spec, ADAPTERS, lora(), seed=0, gradient_checkpointing=False)
    ask = [{"role": "user", "content": "Write a Python function aux(x) that doubles x."}]
    gens = policy.generate(
        [GenRequest(a, ask, 4) for a in ADAPTERS],
        SamplingSpec(temperature=0.8, top_p=0.95, top_k=0, max_new_tokens=24),
    )
    agents = [g.agent for g in gens for _ in g.token_ids]
    prompts = [g.prompt_ids for g in gens for _ in g.token_ids]
    completions = [ids for g in gens for ids in g.token_ids]
    adv = [(-1.0) ** k for k in range(len(agents))]
    losses = policy.mixed_backward(
        ADAPTERS, agents, prompts, completions, adv, [1.0] * len(agents), RowLoss("token_mean")
    )
    assert torch.isfinite(losses).all()
    (base,) = policy._bases.values()  # both adapters on one base: one recorded pass
    assert [p.graph is not None for p in base.update._passes.values()] == [True]
    for a in ADAPTERS:
        grads = [p.grad for p in policy.trainable_parameters(a)]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        assert any(g.abs().sum() > 0 for g in grads)
