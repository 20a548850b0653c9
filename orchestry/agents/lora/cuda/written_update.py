"""The update's forward pass written out: every adapter's rows in one batch, with gradients.

On a GPU the update through `transformers` and peft was launch-bound: one forward and backward per
adapter, ~1 s of host time for ~0.2 s of kernels in a step of 128 rows (benchmarks/README.md, #13).
Here the forward of a Llama-style decoder (Llama, SmolLM2, Qwen2: `graph_decode.supports`) is written
out as `graph_decode` writes out a decode step, but over whole rows and differentiable in the LoRA
weights:

- q/k/v and gate/up are one matmul each over the frozen base weights, concatenated once;
- every adapter's LoRA is stacked per projection group, A = [A_1; ...; A_k] (over projections and
  adapters) and B block-diagonal over projections, built from the parameters at each call so the
  gradients reach them; a row reaches only its own adapter's block through a mask that holds the
  adapter's scaling (alpha / r) there and 0 elsewhere:  y = x W^T + ((x A^T) * mask[row]) B^T;
- attention is `scaled_dot_product_attention` with a causal mask over left-padded prompts; only
  the completion columns go through the head;
- on a GPU with Triton, the gated activation `silu(gate) * up` and its backward are one kernel
  each (`triton_decode.GatedSilu`), and so are the chosen tokens' log-probs from the head's
  logits (`triton_logprob`: no float32 copy of [tokens, vocab]).

The rows of adapter a get peft's LoRA term (the other blocks are multiplied by 0), so the gradient of
each adapter is the one of a pass over its rows alone, up to float rounding; the terms are computed
in the base's dtype (bfloat16 on a GPU), where peft computes them in the adapters' float32. Plain
LoRA without dropout only; `supports_written` says when this applies (`engine.written_applies`,
the CPU side's choice of the update's path, asks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

from orchestry.agents.lora.cuda.fused import frozen_concat, rotate
from orchestry.agents.lora.cuda.graph_decode import supports
from orchestry.agents.lora.cuda.triton_decode import GatedSilu, fused_silu
from orchestry.agents.lora.cuda.triton_logprob import token_logprobs
from orchestry.agents.lora.cuda.triton_support import usable
from orchestry.agents.lora.kv_prefix import (
    checkpointing,
    distinct_prompts,
    pad_rows,
    target_logprobs,
    upload,
)


def supports_written(model: PeftModel) -> bool:
    """Whether the written-out update applies: a decoder `graph_decode` writes out, LoRA without dropout,
    no gradient checkpointing (that path recomputes through the module hooks this one skips)."""
    if not supports(model) or checkpointing(model):
        return False
    for module in model.modules():
        if isinstance(module, LoraLayer):
            for drop in module.lora_dropout.values():
                if not isinstance(drop, torch.nn.Identity):
                    return False
    return True


Leaves = dict[int, torch.Tensor]
"""Stand-ins for LoRA parameters by `id` (see `WrittenForward.logprobs`)."""


class _Group:
    """Projections of one input (e.g. q, k, v): frozen weights concatenated, LoRA stacked per call."""

    def __init__(self, modules: Sequence[torch.nn.Module]) -> None:
        self.lora = [m if isinstance(m, LoraLayer) and m.lora_A else None for m in modules]
        bases = [
            m.base_layer if lo is not None else m for m, lo in zip(modules, self.lora, strict=True)
        ]
        self.weight, self.bias = frozen_concat(bases)
        self.outs = [b.weight.shape[0] for b in bases]

    def stack(
        self, adapters: Sequence[str], leaves: Leaves
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]] | None:
        """(A [ranks, in], B [out, ranks] times each adapter's scaling, the owner of each rank
        column) over the adapters, or None. The scaling multiplies B in B's float32, before any
        cast to the base's dtype (a scaling such as 16 / 12 has no exact bfloat16). The owners are
        the same in every layer, so their mask is built once per pass (`_Masks`). A parameter
        found in `leaves` (by id) is read through its stand-in."""
        if all(m is None for m in self.lora):
            return None
        a_parts, b_parts, owner = [], [], []
        for m, out in zip(self.lora, self.outs, strict=True):
            if m is None:  # a projection without LoRA: zero rows in B, no rank columns
                b_parts.append(self.weight.new_zeros((out, 0)))
                continue
            for k, name in enumerate(adapters):
                a_w = leaves.get(id(m.lora_A[name].weight), m.lora_A[name].weight)
                a_parts.append(a_w)
                owner += [k] * a_w.shape[0]
            b_w = [(m.lora_B[n].weight, float(m.scaling[n])) for n in adapters]
            b_parts.append(torch.cat([leaves.get(id(w), w) * s for w, s in b_w], 1))
        return torch.cat(a_parts, 0), torch.block_diag(*b_parts), tuple(owner)

    def __call__(
        self,
        x: torch.Tensor,
        lora: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: [tokens, in] -> [tokens, out] (+ residual, in the GEMM where there is no bias).

        The LoRA terms are computed in the base's dtype, as the decoder computes them (`Fused`):
        peft casts x to the adapters' float32 beside a bfloat16 base; at the 3B shape those casts
        and float32 GEMMs were a large share of the update's elementwise work (issue 36). The
        adapters stay float32; their gradients come back through the casts. `mask` (0 or 1) is
        in the base's dtype."""
        if residual is not None and self.bias is None:
            y = torch.addmm(residual, x, self.weight.t())
        else:
            y = torch.nn.functional.linear(x, self.weight, self.bias)
            y = y if residual is None else y + residual
        if lora is not None:
            a, b, mask = lora
            low = torch.mm(x, a.to(x.dtype).t()) * mask
            y = torch.addmm(y, low, b.to(x.dtype).t())
        return y


class WrittenForward:
    """The written-out decoder of one peft model: per-token log-probs of completions, any adapters mixed."""

    def __init__(self, model: PeftModel) -> None:
        inner = model.get_base_model()
        config = inner.config
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        body = inner.model
        self.embed, self.norm, self.rotary, self.head = (
            body.embed_tokens,
            body.norm,
            body.rotary_emb,
            inner.lm_head,
        )
        self.layers = []
        for layer in body.layers:
            att, mlp = layer.self_attn, layer.mlp
            groups = (
                _Group([att.q_proj, att.k_proj, att.v_proj]),
                _Group([att.o_proj]),
                _Group([mlp.gate_proj, mlp.up_proj]),
                _Group([mlp.down_proj]),
            )
            self.layers.append((layer, groups, mlp.act_fn, att.scaling))
        # silu(gate) * up as a Triton kernel on a GPU (the config names SiLU: `graph_decode`)
        self.fused_act = fused_silu(config, self.embed.weight)
        # each LoRA layout's (owner, scale) of its rank columns on the device, made once: a copy
        # from the host inside a CUDA graph's capture is not allowed
        self.layouts: dict[tuple, torch.Tensor] = {}

    def logprobs(
        self, adapters: list[str], inputs: PassInputs, leaves: Leaves | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs [B, Wc] (float32) of each completion given its prompt, row i through
        adapter `adapters[inputs.row_adapter[i]]`, and the completions' token mask (float32). The
        rows are laid out on the device by `pass_inputs`; this is device work only, no host sync,
        so `graph_update` can record it as a CUDA graph. `leaves`: stand-ins for LoRA parameters
        (id -> a tensor sharing its storage), for gradients with respect to them.

        Rows with the same prompt and adapter (the G samples of a group) share one pass over the
        prompt: its keys and values are gathered for each row's completion, so the gradient reaches
        the adapter through the prompt too, as in `kv_prefix.completion_logits`."""
        group = inputs.group
        width_p, width_c = inputs.pre_ids.shape[1], inputs.comp_ids.shape[1]
        parts = _Parts(inputs.pre_real, inputs.comp_real, group)
        token_adapter = torch.cat(
            [
                inputs.prompt_adapter.repeat_interleave(width_p),
                inputs.row_adapter.repeat_interleave(width_c),
            ]
        )
        lora = _Masks(adapters, token_adapter, self.layouts, leaves or {})
        h_pre, h_comp = self._forward(inputs.pre_ids, inputs.comp_ids, parts, lora)
        # completion token 0 is predicted by its prompt's last column, token j by completion j - 1
        kept = torch.cat([h_pre[group, -1:], h_comp[:, :-1]], 1)
        logits = self.head(kept)
        mask = inputs.comp_real.to(torch.float32)
        if usable(logits):  # two kernels over the logits, no float32 copy (triton_logprob)
            return token_logprobs(logits, inputs.comp_ids) * mask, mask
        return target_logprobs(logits, inputs.comp_ids) * mask, mask

    def _forward(
        self,
        pre_ids: torch.Tensor,
        comp_ids: torch.Tensor,
        parts: _Parts,
        lora: _Masks,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Final-norm hidden states of the prompts [U, Wp, hidden] (left-padded) and of the
        completions [B, Wc, hidden] (right-padded), every token of both in one flat batch except
        in attention."""
        (u, wp), (b, wc) = pre_ids.shape, comp_ids.shape
        heads, kv, d = self.heads, self.kv_heads, self.head_dim
        h = self.embed(torch.cat([pre_ids.reshape(-1), comp_ids.reshape(-1)]))
        cos_p, sin_p = self.rotary(h, parts.pre_positions)
        cos_c, sin_c = self.rotary(h, parts.comp_positions)
        rms = torch.nn.functional.rms_norm
        split = u * wp
        for layer, (qkv, o, gate_up, down), act, scaling in self.layers:
            norm = layer.input_layernorm
            x = rms(h, (h.shape[-1],), norm.weight, norm.variance_epsilon)
            y = qkv(x, lora(qkv))
            y_p = y[:split].view(u, wp, heads + 2 * kv, d)
            y_c = y[split:].view(b, wc, heads + 2 * kv, d)
            qk_p = rotate(y_p[:, :, : heads + kv], cos_p[:, :, None], sin_p[:, :, None])
            qk_c = rotate(y_c[:, :, : heads + kv], cos_c[:, :, None], sin_c[:, :, None])
            k_p, v_p = qk_p[:, :, heads:], y_p[:, :, heads + kv :]
            k_c = torch.cat([k_p[parts.group], qk_c[:, :, heads:]], 1)
            v_c = torch.cat([v_p[parts.group], y_c[:, :, heads + kv :]], 1)
            att_p = _attend(qk_p[:, :, :heads], k_p, v_p, parts.pre_mask, scaling)
            att_c = _attend(qk_c[:, :, :heads], k_c, v_c, parts.comp_mask, scaling)
            att = torch.cat([att_p.reshape(split, -1), att_c.reshape(b * wc, -1)])
            h = o(att, lora(o), residual=h)
            norm = layer.post_attention_layernorm
            x = rms(h, (h.shape[-1],), norm.weight, norm.variance_epsilon)
            y = gate_up(x, lora(gate_up))
            if self.fused_act:  # one kernel forward and one backward (triton_decode)
                mid = GatedSilu.apply(y)
            else:
                gate, up = y.chunk(2, dim=-1)
                mid = act(gate) * up
            h = down(mid, lora(down), residual=h)
        h = rms(h, (h.shape[-1],), self.norm.weight, self.norm.variance_epsilon)
        return h[:split].view(u, wp, -1), h[split:].view(b, wc, -1)


class _Masks:
    """A group's stacked LoRA with its per-token mask [tokens, ranks]: 1 in the rank columns of the
    token's adapter, 0 elsewhere (the scalings are in B, `_Group.stack`). One mask per distinct
    owner layout in a pass, not one per layer: every layer has the same layout. The layout's owner
    tensor comes from `layouts`, kept by the model's `WrittenForward`: built from a host list
    once, not per pass."""

    def __init__(
        self,
        adapters: list[str],
        token_adapter: torch.Tensor,
        layouts: dict[tuple, torch.Tensor],
        leaves: Leaves,
    ) -> None:
        self.adapters, self.token_adapter, self.layouts = adapters, token_adapter, layouts
        self.leaves = leaves
        self.masks: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, group: _Group) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        stacked = group.stack(self.adapters, self.leaves)
        if stacked is None:
            return None
        a, b, layout = stacked
        if layout not in self.masks:
            key = (layout, a.device)
            if key not in self.layouts:
                self.layouts[key] = torch.tensor(layout, device=a.device)
            owner = self.layouts[key]
            same = self.token_adapter[:, None] == owner[None, :]
            self.masks[layout] = same.to(group.weight.dtype)  # the LoRA terms' (`_Group.__call__`)
        return a, b, self.masks[layout]


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scaling: float
) -> torch.Tensor:
    """Attention of q [n, tq, heads, d] over k, v [n, tk, kv heads, d] -> [n, tq, heads, d]."""
    group = q.shape[2] // k.shape[2]
    return torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2).repeat_interleave(group, 1),
        v.transpose(1, 2).repeat_interleave(group, 1),
        attn_mask=mask,
        scale=scaling,
    ).transpose(1, 2)


@dataclass(frozen=True)
class PassInputs:
    """One pass's rows on the device: the distinct (prompt, adapter) pairs left-padded [U, Wp],
    the completions right-padded [B, Wc], their real-token masks (bool), each row's prompt (`group`)
    and the adapter index of each prompt and row."""

    pre_ids: torch.Tensor
    pre_real: torch.Tensor
    comp_ids: torch.Tensor
    comp_real: torch.Tensor
    group: torch.Tensor
    prompt_adapter: torch.Tensor
    row_adapter: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


def pass_inputs(
    row_adapter: Sequence[int],
    prompts: Sequence[list[int]],
    completions: Sequence[list[int]],
    pad: int,
    device: torch.device,
    shape: tuple[int, int, int, int] | None = None,
) -> PassInputs:
    """The rows laid out for `WrittenForward.logprobs`. `shape` (rows, prompts, prompt width,
    completion width), at least the rows' own, pads them to a fixed layout: padding rows have no
    real completion token and padding prompts none at all, so they change no real row's values."""
    unique, _, of = distinct_prompts(prompts, row_adapter)
    need = (len(of), len(unique), max(len(p) for p, _ in unique), max(map(len, completions)))
    n_rows, n_prompts, width_p, width_c = shape or need
    if any(s < n for s, n in zip((n_rows, n_prompts, width_p, width_c), need, strict=True)):
        raise ValueError(f"pass shape {shape} is smaller than its rows' {need}")
    extra_p, extra_r = n_prompts - len(unique), n_rows - len(of)
    pre_ids, pre_real = pad_rows(
        [list(p) for p, _ in unique] + [[]] * extra_p, width_p, pad, device
    )
    comp_ids, comp_real = pad_rows(
        list(completions) + [[]] * extra_r, width_c, pad, device, side="right"
    )
    host = upload(
        torch.tensor(
            of
            + [0] * extra_r
            + [a for _, a in unique]
            + [0] * extra_p
            + list(row_adapter)
            + [0] * extra_r
        ),
        device,
    )
    group, prompt_adapter, row_adapters = host.split([n_rows, n_prompts, n_rows])
    return PassInputs(
        pre_ids, pre_real.bool(), comp_ids, comp_real.bool(), group, prompt_adapter, row_adapters
    )


class _Parts:
    """Positions and attention masks of the prompts (left-padded) and the completions (right-padded,
    each after its prompt, `group[i]`). A padding query also sees itself, so no row is empty (NaN)."""

    def __init__(self, pre_real: torch.Tensor, comp_real: torch.Tensor, group: torch.Tensor):
        wp, (b, wc) = pre_real.shape[1], comp_real.shape
        device = pre_real.device
        self.group = group
        self.pre_positions = (pre_real.long().cumsum(-1) - 1).clamp_(min=0)
        length = pre_real.sum(-1)[group]
        self.comp_positions = length[:, None] + torch.arange(wc, device=device)[None, :]
        eye_p = torch.eye(wp, dtype=torch.bool, device=device)
        causal_p = torch.ones((wp, wp), dtype=torch.bool, device=device).tril()
        self.pre_mask = ((causal_p[None] & pre_real[:, None, :]) | eye_p)[:, None]
        eye_c = torch.eye(wc, dtype=torch.bool, device=device)
        causal_c = torch.ones((wc, wc), dtype=torch.bool, device=device).tril()
        own = (causal_c[None] & comp_real[:, None, :]) | eye_c
        prompt = pre_real[group][:, None, :].expand(b, wc, wp)
        self.comp_mask = torch.cat([prompt, own], -1)[:, None]
