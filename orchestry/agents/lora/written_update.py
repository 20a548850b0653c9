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
  the completion columns go through the head.

The rows of adapter a get exactly peft's LoRA term (the other blocks are multiplied by 0), so the
gradient of each adapter is the one of a pass over its rows alone, up to float rounding. Plain LoRA
without dropout only; `supports_written` says when this applies.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

from orchestry.agents.lora.graph_decode import frozen_concat, rotate, supports
from orchestry.agents.lora.kv_prefix import checkpointing, pad_rows


def written_applies(model: PeftModel, path: str | None) -> bool:
    """Whether the update takes this path: `path` "written" where it applies, "peft" never, None
    (the default) on a GPU where it applies."""
    if path == "peft" or (path is None and next(model.parameters()).device.type != "cuda"):
        return False
    return supports_written(model)


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
        self, adapters: Sequence[str], row_adapter: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """(A [ranks, in], B [out, ranks], mask [rows, 1, ranks]) over the adapters, or None."""
        if all(m is None for m in self.lora):
            return None
        a_parts, b_parts, owner, scale = [], [], [], []
        for m, out in zip(self.lora, self.outs, strict=True):
            if m is None:  # a projection without LoRA: zero rows in B, no rank columns
                b_parts.append(self.weight.new_zeros((out, 0)))
                continue
            for k, name in enumerate(adapters):
                a_w = m.lora_A[name].weight
                a_parts.append(a_w)
                owner += [k] * a_w.shape[0]
                scale += [float(m.scaling[name])] * a_w.shape[0]
            b_parts.append(torch.cat([m.lora_B[n].weight for n in adapters], 1))
        a = torch.cat(a_parts, 0)
        b = torch.block_diag(*b_parts)
        owner_t = torch.tensor(owner, device=a.device)
        scale_t = torch.tensor(scale, device=a.device, dtype=a.dtype)
        mask = torch.where(row_adapter[:, None] == owner_t[None, :], scale_t[None, :], 0.0)
        return a, b, mask[:, None, :]

    def __call__(
        self,
        x: torch.Tensor,
        lora: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
        residual: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: [rows, tokens, in] -> [rows, tokens, out] (+ residual)."""
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        if residual is not None:
            y = y + residual
        if lora is not None:
            a, b, mask = lora
            # in the adapters' dtype (float32 beside a bfloat16 base), as peft computes them
            low = torch.matmul(x.to(a.dtype), a.t()) * mask
            y = y + torch.matmul(low, b.t()).to(y.dtype)
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

    def token_logprobs(
        self,
        adapters: Sequence[str],
        row_adapter: Sequence[int],
        prompts: Sequence[list[int]],
        completions: Sequence[list[int]],
        pad: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probs [B, Wc] (float32) of each completion given its prompt, row i through
        adapter `adapters[row_adapter[i]]`, and the completions' token mask (float32)."""
        device = self.embed.weight.device
        width_p = max(map(len, prompts))
        prompt_ids, prompt_real = pad_rows(list(prompts), width_p, pad, device)
        width_c = max(map(len, completions))
        comp_ids, comp_real = pad_rows(list(completions), width_c, pad, device, side="right")
        ids = torch.cat([prompt_ids, comp_ids], 1)
        real = torch.cat([prompt_real, comp_real], 1).bool()
        row_index = torch.tensor(list(row_adapter), device=device)
        hidden = self._forward(ids, real, list(adapters), row_index)
        # column width_p - 1 + j predicts completion token j
        kept = hidden[:, width_p - 1 : width_p - 1 + width_c]
        logits = self.head(kept).float()
        chosen = logits.gather(-1, comp_ids.unsqueeze(-1)).squeeze(-1)
        mask = comp_real.to(logits.dtype)
        return (chosen - torch.logsumexp(logits, dim=-1)) * mask, mask

    def _forward(
        self, ids: torch.Tensor, real: torch.Tensor, adapters: list[str], row_adapter: torch.Tensor
    ) -> torch.Tensor:
        """The final-norm hidden states [B, T, hidden] of left-padded rows (`real`: not padding)."""
        b, t = ids.shape
        heads, kv, d = self.heads, self.kv_heads, self.head_dim
        h = self.embed(ids)
        positions = (real.long().cumsum(-1) - 1).clamp_(min=0)
        cos, sin = self.rotary(h, positions)  # [b, t, d]
        cos, sin = cos[:, :, None], sin[:, :, None]
        causal = torch.ones((t, t), dtype=torch.bool, device=ids.device).tril()
        # a padding query sees itself too, so no row of the attention is empty (NaN)
        eye = torch.eye(t, dtype=torch.bool, device=ids.device)
        mask = ((causal[None] & real[:, None, :]) | eye)[:, None]
        rms = torch.nn.functional.rms_norm
        for layer, (qkv, o, gate_up, down), act, scaling in self.layers:
            norm = layer.input_layernorm
            x = rms(h, (h.shape[-1],), norm.weight, norm.variance_epsilon)
            y = qkv(x, qkv.stack(adapters, row_adapter)).view(b, t, heads + 2 * kv, d)
            qk = rotate(y[:, :, : heads + kv], cos, sin)  # queries and keys turn together
            q, k, v = qk[:, :, :heads], qk[:, :, heads:], y[:, :, heads + kv :]
            group = heads // kv
            att = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2).repeat_interleave(group, 1),
                v.transpose(1, 2).repeat_interleave(group, 1),
                attn_mask=mask,
                scale=scaling,
            ).transpose(1, 2)
            h = o(att.reshape(b, t, heads * d), o.stack(adapters, row_adapter), residual=h)
            norm = layer.post_attention_layernorm
            x = rms(h, (h.shape[-1],), norm.weight, norm.variance_epsilon)
            gate, up = gate_up(x, gate_up.stack(adapters, row_adapter)).chunk(2, dim=-1)
            h = down(act(gate) * up, down.stack(adapters, row_adapter), residual=h)
        return rms(h, (h.shape[-1],), self.norm.weight, self.norm.variance_epsilon)


def mixed_token_logprobs(
    model: PeftModel,
    cache: dict[str, WrittenForward],
    adapters: Sequence[str],
    pad: int,
    prompts: Sequence[list[int]],
    completions: Sequence[list[int]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """`WrittenForward.token_logprobs` of `model`, row i through adapter `adapters[i]`, with
    gradients to the adapters; `cache` keeps the written-out decoder (its concatenated weights)."""
    if len(prompts) != len(completions) or len(prompts) != len(adapters) or not prompts:
        raise ValueError(
            f"{len(prompts)} prompts, {len(completions)} completions, {len(adapters)} adapters"
        )
    if "forward" not in cache:
        cache["forward"] = WrittenForward(model)
    names = list(dict.fromkeys(adapters))
    return cache["forward"].token_logprobs(
        names, [names.index(a) for a in adapters], prompts, completions, pad
    )
