"""Decoding on a GPU as one CUDA graph: every adapter's rows in one batch, sampling on the device.

`transformers`' `generate` on a static cache spent ~14 ms per decode step of 64 rows on an H100
(benchmarks/gpu_step.py: 4,700 new tokens/s), nearly all of it on the host: its Python loop, the
logits processors, a device-to-host sync per step, graph breaks around the LoRA layers, and one call
per adapter. The GPU work of such a step is well under a millisecond for a 135M model.

Here one decode step is written out over static buffers for Llama-style decoders (Llama, SmolLM2,
Qwen2): RMSNorm, the q/k/v/o and MLP projections (with every adapter's LoRA stacked, a row reaching
only its own adapter's block through a 0/1 mask, as in `stacked_lora`), rotary positions, attention
over a static KV cache, the head, then sampling on the device (`device_sampler.draw`, with uniforms
drawn once per call). It ran at 22,000 new tokens/s in a training step. The step is captured once per
shape as a CUDA graph and replayed; the step counter lives on the device, the host looks only every
`STOP_CHECK` steps, from `min_new` on, whether every row has stopped. Each distinct (prompt,
adapter) pair is prefilled once, eagerly, left-padded to a multiple of `PROMPT_BUCKET` columns, and
its keys and values copied to the rows that share it (the G samples of a group: at the 3B shape prefilling all 128 rows took ~0.45 s
of a 1.8 s generation, issue 36); the batch is padded to a multiple of `ROW_BUCKET` rows.

On a GPU with Triton most steps of the decode layer are kernels of this package: RMSNorm and the
LoRA terms' expand-and-add (triton_layer; their shrink rides in the frozen GEMM, `fused.Fused`),
the rotary turn with the cache write (triton_rotary), attention over the cache up to the column
being written and the gated activation (triton_decode); elsewhere they are the torch operations
beside them. On a CPU the same code runs eagerly (no graph); the tests compare it with `generate`
there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer

from orchestry.agents.base import SamplingSpec
from orchestry.agents.lora.cuda.device_sampler import draw
from orchestry.agents.lora.cuda.fused import Fused, rotate
from orchestry.agents.lora.cuda.triton_decode import decode_attention, fused_silu, silu_mul
from orchestry.agents.lora.cuda.triton_layer import rms_norm
from orchestry.agents.lora.cuda.triton_rotary import available as rotary_kernel_available
from orchestry.agents.lora.cuda.triton_rotary import rotary_into_cache
from orchestry.agents.lora.cuda.triton_support import usable
from orchestry.agents.lora.kv_prefix import distinct_prompts, pad_rows

PROMPT_BUCKET = 64
"""Prompts are left-padded to a multiple of this many columns (few graph shapes)."""
ROW_BUCKET = 16
"""The batch is padded to a multiple of this many rows (extra rows are decoded and dropped)."""
STOP_CHECK = 16
"""Decode steps between the host's looks at whether every row has stopped."""
SUPPORTED = ("llama", "qwen2")
"""`config.model_type`s whose decoder layer is the one written out here."""


@dataclass(frozen=True)
class DecodeShape:
    rows: int
    width: int
    max_new: int
    min_new: int
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float


def supports(model: PeftModel) -> bool:
    """Whether `model` is a decoder this module writes out (plain LoRA adapters, on q/k/v/o/MLP)."""
    inner = model.get_base_model()
    config = inner.config
    if getattr(config, "model_type", None) not in SUPPORTED:
        return False
    if getattr(inner, "hf_quantizer", None) is not None:  # e.g. NF4: packed weights, not matrices
        return False
    if getattr(config, "use_sliding_window", False):  # Qwen2 option: a window we do not write out
        return False
    for module in inner.modules():
        if isinstance(module, LoraLayer) and module.lora_A:
            if set(getattr(module, "lora_variant", {})) or not isinstance(
                module.base_layer, torch.nn.Linear
            ):
                return False
    embed = inner.get_input_embeddings()
    return not isinstance(embed, LoraLayer) and not isinstance(inner.lm_head, LoraLayer)


class GraphDecoder:
    """Static buffers, the written-out decode step and (on CUDA) its captured graph, for one shape."""

    def __init__(self, model: PeftModel, adapters: Sequence[str], shape: DecodeShape) -> None:
        inner = model.get_base_model()
        self.model, self.shape, self.adapters = inner, shape, list(adapters)
        config = inner.config
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        body = inner.model
        self.embed, self.norm, self.rotary = body.embed_tokens, body.norm, body.rotary_emb
        self.head = inner.lm_head
        device, dtype = self.embed.weight.device, self.embed.weight.dtype
        self.device = device
        # on a GPU with Triton the decode step turns queries and keys into the cache in one kernel
        # (triton_rotary), attends and applies the gated activation in one each (triton_decode)
        kernels = usable(self.embed.weight)
        # the rotary and attention kernels both need a power-of-two head size
        self.fused_attention = kernels and rotary_kernel_available(self.head_dim)
        self.fused_act = fused_silu(config, self.embed.weight)
        self.fused_norm = kernels
        b, length = shape.rows, shape.width + shape.max_new
        self.layers = []
        for layer in body.layers:
            att, mlp = layer.self_attn, layer.mlp
            qkv = Fused([att.q_proj, att.k_proj, att.v_proj], adapters, b)
            o = Fused([att.o_proj], adapters, b)
            gate_up = Fused([mlp.gate_proj, mlp.up_proj], adapters, b)
            down = Fused([mlp.down_proj], adapters, b)
            cache = torch.zeros(
                (2, b, self.kv_heads, length, self.head_dim), device=device, dtype=dtype
            )
            self.layers.append((layer, (qkv, o, gate_up, down), mlp.act_fn, att.scaling, cache))
        # per call: prompt lengths, which key columns hold real tokens, uniforms, stop tokens
        self.prompt_len = torch.zeros(b, dtype=torch.long, device=device)
        self.real = torch.zeros((b, length), dtype=torch.bool, device=device)
        self.real[:, shape.width :] = True
        self.columns = torch.arange(length, device=device)
        self.uniform = torch.zeros((shape.max_new, b), dtype=torch.float32, device=device)
        vocab = self.head.weight.shape[0]
        self.stop = torch.zeros(vocab, dtype=torch.bool, device=device)
        self.stop_cols = torch.zeros(0, dtype=torch.long, device=device)  # the stop tokens' ids
        self.pad = torch.zeros((), dtype=torch.long, device=device)
        # decode state, advanced inside the step
        self.token = torch.zeros(b, dtype=torch.long, device=device)
        self.step = torch.zeros(1, dtype=torch.long, device=device)
        self.done = torch.zeros(b, dtype=torch.bool, device=device)
        self.out = torch.zeros((b, shape.max_new), dtype=torch.long, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None

    # ------------------------------------------------------------------ the model, written out

    def _forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        columns: torch.Tensor | None,
        mask: torch.Tensor | None,
        prompts: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Hidden states of the last column; writes the keys/values at `columns` (None: 0..T-1).

        `prompts` (prefill only): (first, of) when `ids` holds the batch's distinct prompts, prompt
        u being row first[u]'s (whose adapter it runs through) and row i's prompt being of[i]; each
        prompt is run once and its keys and values are copied to every row that has it."""
        b, t = ids.shape
        heads, kv, d = self.heads, self.kv_heads, self.head_dim
        h = self.embed(ids).view(b * t, -1)
        cos, sin = self.rotary(h, positions)  # [b, t, d]
        cos, sin = cos[:, :, None], sin[:, :, None]
        rms = self._decode_norm if columns is not None and self.fused_norm else self._norm
        first, of = prompts if prompts is not None else (None, None)
        for layer, (qkv, o, gate_up, down), act, scaling, cache in self.layers:
            x = rms(h, layer.input_layernorm)
            y = qkv(x, rows=first).view(b, t, heads + 2 * kv, d)
            q, k, v = self._turn_into_cache(y, cos, sin, cache, columns, of)
            att = self._attend(q, k, v, cache, columns, mask, scaling)
            h = o(att.reshape(b * t, heads * d), residual=h, rows=first)
            x = rms(h, layer.post_attention_layernorm)
            if columns is not None and self.fused_act:
                h = down(silu_mul(gate_up(x)), residual=h)
            else:
                gate, up = gate_up(x, rows=first).chunk(2, dim=-1)
                h = down(act(gate) * up, residual=h, rows=first)
        last = h.view(b, t, -1)[:, -1]
        if of is not None:
            last = last.index_select(0, of)
        return rms(last, self.norm)

    @staticmethod
    def _norm(h: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
        return torch.nn.functional.rms_norm(h, (h.shape[-1],), norm.weight, norm.variance_epsilon)

    @staticmethod
    def _decode_norm(h: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
        return rms_norm(h, norm.weight, norm.variance_epsilon)

    def _turn_into_cache(
        self,
        y: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: torch.Tensor,
        columns: torch.Tensor | None,
        of: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Queries and keys turned, keys and values written to the cache (prefill: the first t
        columns, copied to the rows of each prompt; decode: `columns`). Returns q [b, t, heads, d]
        and, in torch's form, k and v [b, kv, t, d]; the decode kernel returns q [b, heads, d]."""
        heads, kv, t = self.heads, self.kv_heads, y.shape[1]
        if columns is not None and self.fused_attention:  # turned and written by one kernel
            q = rotary_into_cache(y[:, 0], cos[:, 0, 0], sin[:, 0, 0], cache, columns, heads, kv)
            return q, None, None
        qk = rotate(y[:, :, : heads + kv], cos, sin)  # queries and keys turn together
        q, k, v = qk[:, :, :heads], qk[:, :, heads:].transpose(1, 2), y[:, :, heads + kv :]
        v = v.transpose(1, 2)
        if columns is None:
            cache[0, :, :, :t] = k if of is None else k.index_select(0, of)
            cache[1, :, :, :t] = v if of is None else v.index_select(0, of)
        else:
            cache[0].index_copy_(2, columns, k)
            cache[1].index_copy_(2, columns, v)
        return q, k, v

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor | None,
        v: torch.Tensor | None,
        cache: torch.Tensor,
        columns: torch.Tensor | None,
        mask: torch.Tensor | None,
        scaling: float,
    ) -> torch.Tensor:
        """Attention of the new columns' queries; prefill over their own keys, decode over the
        cache. Returns [b, t, heads, d] (decode: t = 1, any layout that reshapes to it)."""
        heads, kv, d = self.heads, self.kv_heads, self.head_dim
        if columns is not None and self.fused_attention:  # a program per row and key/value head
            return decode_attention(q.view(-1, heads, d), cache, self.real, columns, scaling)
        group = heads // kv
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if columns is None:
            assert k is not None and v is not None
            return sdpa(
                q.transpose(1, 2),
                k.repeat_interleave(group, 1),
                v.repeat_interleave(group, 1),
                attn_mask=mask,
                scale=scaling,
            ).transpose(1, 2)
        # one new column: the query heads of a key/value head attend together
        return sdpa(q.reshape(-1, kv, group, d), cache[0], cache[1], attn_mask=mask, scale=scaling)

    def _choose(self, hidden: torch.Tensor) -> None:
        """Pick the next token of every row from the head's logits; record it; advance the step."""
        s = self.shape
        logits = self.head(hidden)  # bfloat16 on a GPU: `draw` reads it as it is
        if s.min_new:  # the stop tokens' columns only, banned before min_new: a masked fill
            # over [rows, vocab] was ~54 us a step at the 3B shape (issue 36)
            early = self.step < s.min_new
            banned = logits.index_select(1, self.stop_cols).masked_fill(early, -math.inf)
            logits.index_copy_(1, self.stop_cols, banned)
        if s.do_sample:
            u = self.uniform.index_select(0, self.step).squeeze(0)
            chosen = draw(logits, u, s.temperature, s.top_k, s.top_p)
        else:
            chosen = logits.argmax(-1)
        chosen = torch.where(self.done, self.pad, chosen)
        self.out.index_copy_(1, self.step, chosen[:, None])
        self.done |= self.stop[chosen]
        self.token.copy_(chosen)
        self.step += 1

    def _decode_step(self) -> None:
        column = self.step + (self.shape.width - 1)  # the column of the token chosen last
        positions = (self.prompt_len + self.step - 1)[:, None]
        mask = None  # the attention kernel reads `self.real` up to `column` itself
        if not self.fused_attention:
            mask = (self.real & (self.columns[None, :] <= column))[:, None, None, :]
        self._choose(self._forward(self.token[:, None], positions, column, mask))

    # ------------------------------------------------------------------ one call

    def run(
        self,
        rows: list[list[int]],
        row_adapter: list[int],
        pad: int,
        stop_ids: set[int],
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """The new tokens of each row (max_new columns, pad after a stop token)."""
        s, b = self.shape, self.shape.rows
        n = len(rows)
        self._check(rows, row_adapter, pad, stop_ids)
        rows = rows + [rows[0]] * (b - n)  # bucket padding: repeat a row, drop its output
        row_adapter = row_adapter + [row_adapter[0]] * (b - n)
        adapter = torch.tensor(row_adapter, device=self.device)
        for _, fused, *_ in self.layers:
            for part in fused:
                part.refresh(adapter)
        # the distinct (prompt, adapter) pairs are prefilled once each (the G samples of a group
        # share theirs), their keys and values copied to every row that has them
        pairs, first, of_row = distinct_prompts(rows, row_adapter)
        ids, real = pad_rows([list(p) for p, _ in pairs], s.width, pad, self.device)
        real = real.bool()
        of = torch.tensor(of_row, device=self.device)
        self.real[:, : s.width] = real.index_select(0, of)
        self.prompt_len.copy_(self.real[:, : s.width].sum(-1))
        self.stop.zero_()
        self.stop[sorted(stop_ids)] = True
        cols = torch.tensor(sorted(stop_ids), dtype=torch.long)
        if cols.numel() != self.stop_cols.numel():  # the recorded step reads this many columns
            self.stop_cols, self.graph = cols.to(self.device), None
        else:
            self.stop_cols.copy_(cols)
        self.pad.fill_(pad)
        self.uniform.uniform_(generator=generator)
        self.step.zero_()
        self.done.zero_()
        self.out.fill_(pad)
        positions = (real.long().cumsum(-1) - 1).clamp_(min=0)
        causal = torch.ones((s.width, s.width), dtype=torch.bool, device=self.device).tril()
        # a padding query sees itself too, so no row of the attention is empty (NaN)
        mask = (causal[None] & real[:, None, :]) | torch.eye(
            s.width, dtype=torch.bool, device=self.device
        )
        prompts = (torch.tensor(first, device=self.device), of)
        with torch.no_grad():
            self._choose(self._forward(ids, positions, None, mask[:, None], prompts))
            self._decode_all()
        return self.out[:n].tolist()

    def _check(self, rows: list[list[int]], index: list[int], pad: int, stops: set[int]) -> None:
        """ValueError naming the sizes where a call does not fit the buffers (on the device: an
        index out of bounds, a device-side assert that ends the process)."""
        s, vocab = self.shape, self.embed.weight.shape[0]
        ids = [pad, *stops, *(min(r) for r in rows if r), *(max(r) for r in rows if r)]
        wrong = [
            (not 0 < len(rows) <= s.rows, f"{len(rows)} rows for {s.rows}"),
            (max(map(len, rows)) > s.width, f"prompts of up to {max(map(len, rows))} tokens"),
            (min(ids) < 0 or max(ids) >= vocab, f"token ids {min(ids)}..{max(ids)} for {vocab}"),
            (len(index) != len(rows) or not 0 <= min(index) <= max(index) < len(self.adapters),
             f"adapter indices {min(index)}..{max(index)} for {len(self.adapters)} adapters"),
        ]  # fmt: skip
        if any(bad for bad, _ in wrong):
            raise ValueError(f"graph decoder {s}: " + "; ".join(say for bad, say in wrong if bad))

    def _decode_all(self) -> None:
        steps, min_new = self.shape.max_new - 1, self.shape.min_new
        if self.device.type == "cuda":
            if self.graph is None:
                self._capture()
            replay = self.graph.replay
        else:
            replay = self._decode_step
        for k in range(steps):
            replay()
            # no row stops before min_new (its stop tokens are banned): no look, no host sync
            if (k + 1) % STOP_CHECK == 0 and k + 1 >= min_new and bool(self.done.all()):
                break

    def _capture(self) -> None:
        """Record one decode step as a CUDA graph (after a warm-up on a side stream, as torch asks)."""
        saved = [t.clone() for t in (self.token, self.step, self.done, self.out)]
        caches = [cache.clone() for *_, cache in self.layers]
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._decode_step()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._decode_step()
        for t, old in zip((self.token, self.step, self.done, self.out), saved, strict=True):
            t.copy_(old)
        for (*_, cache), old in zip(self.layers, caches, strict=True):
            cache.copy_(old)
        self.graph = graph


def decode_shape(rows: list[list[int]], sampling: SamplingSpec) -> DecodeShape:
    """The bucketed shape of a call: rows to a multiple of `ROW_BUCKET`, prompts of `PROMPT_BUCKET`."""
    width = -(-max(map(len, rows)) // PROMPT_BUCKET) * PROMPT_BUCKET
    n = -(-len(rows) // ROW_BUCKET) * ROW_BUCKET
    s = sampling
    return DecodeShape(
        n, width, s.max_new_tokens, s.min_new_tokens, s.do_sample, s.temperature, s.top_k, s.top_p
    )
