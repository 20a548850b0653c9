"""The `auto` update settings on a GPU, from the model's size, the row length and the device memory.

`train.microbatch: auto` was 64 rows on any GPU: the 3B shape then ran out of an H200's 140 GB at
step 3, when the update recorded a new pass shape with 71 GiB already in CUDA-graph pools; 16 rows
fit (49 GB allocated, 82 GB reserved; issue 36). The plan below estimates a pass's activations per
row (a SwiGLU decoder's saved tensors per token and layer, plus the float32 logits of the completion
tokens), counts the graph pools as a second pass's worth (a recorded pass keeps its memory while the
next shape records), and takes the largest micro-batch that fits beside the weights and the decode
cache. A CPU keeps its fixed choices (8 rows, checkpointing on: `agents/lora/memory_plan.py`'s
`CPU_PLAN`), so CPU results do not move.

A pass holds each distinct prompt once (the G samples of a problem share it), so a row costs its
completion plus its share of a prompt, not prompt + completion: counting 512 tokens a row where
the 3B shape's passes held ~170 planned 16 rows on an H200 where 32 fit (a pass padded to 32 rows
ran 20 steps at 50 GB allocated; issue 36).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestry.agents.lora.memory_plan import MemoryPlan

GIB = 2**30
MICROBATCHES = (64, 32, 16, 8, 4, 2, 1)
"""Candidates, largest first (64 was the GPU default: the 135M shape keeps it)."""
MIN_GRAPH_ROWS = 8
"""Below this many rows a pass is not worth recording: replay saves launch time, not memory."""
HEADROOM = 0.9
"""The share of free memory planned for (the allocator's fragmentation takes the rest)."""
MARGIN_BYTES = 4 * GIB
"""CUDA context, cuBLAS workspaces, the optimizer's state and temporaries."""
PROMPT_TOKENS_ESTIMATE = 384
"""A prompt's tokens, planned before any prompt is seen (the code prompts are 150-350 tokens)."""
EXTRA_PROMPTS = 2
"""Prompts a pass may hold beyond rows / G: a pass that starts inside one problem's group, and
the next adapter's first prompt."""
POOL_FACTOR = 2
"""Recorded passes hold their activations in the graph pool: one pass live plus one recording."""


@dataclass(frozen=True)
class ModelSize:
    """What the plan reads of a model's config."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    kv_width: int
    """num_key_value_heads * head_dim (the decode cache's width per layer, for keys and values each)."""
    bytes_per_value: int
    """2 for bfloat16/float16, 4 for float32."""


def activation_bytes_per_row(size: ModelSize, tokens: int, completion: int, ckpt: bool) -> int:
    """A pass's saved tensors for one row of `tokens` (prompt share + completion) tokens: per token
    and layer ~12 hidden-wide values (norm inputs in float32, q/k/v, attention out, residuals) and
    4 intermediate-wide (gate, up, their product); with checkpointing only each layer's input is
    kept, plus one layer's full set. The completion tokens' logits: 3 float32 copies (logits,
    log-softmax, its gradient)."""
    per_layer = (12 * size.hidden + 4 * size.intermediate) * size.bytes_per_value
    layers = (size.hidden * size.bytes_per_value * size.layers + per_layer) if ckpt else None
    body = tokens * (layers if layers is not None else per_layer * size.layers)
    return body + completion * size.vocab * 4 * 3


def pass_tokens_per_row(
    rows: int, prompt_tokens: int, completion_tokens: int, group_size: int, cap: int
) -> int:
    """Tokens a pass of `rows` rows holds, per row: every completion, and each distinct prompt once
    (at most rows / G + `EXTRA_PROMPTS` of them), capped at the update's `cap` a row."""
    prompts = min(rows, -(-rows // max(1, group_size)) + EXTRA_PROMPTS)
    return min(cap, -(-prompts * prompt_tokens // rows) + completion_tokens)


def plan_memory(
    size: ModelSize,
    prompt_tokens: int,
    completion_tokens: int,
    group_size: int,
    decode_rows: int,
    free_bytes: int,
    cap_tokens_per_row: int,
) -> MemoryPlan:
    """The largest micro-batch that fits `free_bytes` (measured before the model is loaded) beside
    the weights, the LoRA's optimizer margin and the decode cache of `decode_rows` rows (each its
    own prompt and completion): recorded update graphs if at least `MIN_GRAPH_ROWS` rows fit with
    the pools counted, else eager passes, and checkpointing only when not even that many fit
    without it. A pass's rows are counted by `pass_tokens_per_row`."""
    weights = size.params * size.bytes_per_value
    decode_tokens = min(cap_tokens_per_row, prompt_tokens + completion_tokens)
    cache = decode_rows * decode_tokens * size.layers * 2 * size.kv_width * size.bytes_per_value
    budget = free_bytes * HEADROOM - weights - cache - MARGIN_BYTES
    choices = ((True, False, MIN_GRAPH_ROWS), (False, False, MIN_GRAPH_ROWS), (False, True, 1))
    for record, ckpt, least in choices:
        factor = POOL_FACTOR if record else 1
        for rows in MICROBATCHES:
            tokens = pass_tokens_per_row(
                rows, prompt_tokens, completion_tokens, group_size, cap_tokens_per_row
            )
            row = activation_bytes_per_row(size, tokens, completion_tokens, ckpt)
            if rows >= least and rows * row * factor <= budget:
                return MemoryPlan(rows, ckpt, record)
    return MemoryPlan(1, True, False)  # does not fit by the estimate: the smallest there is


def model_size(config: object, bytes_per_value: int) -> ModelSize:
    """`ModelSize` of a transformers decoder config (Llama, Qwen2 and their kin)."""
    hidden = config.hidden_size
    layers = config.num_hidden_layers
    inter = config.intermediate_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    vocab = config.vocab_size
    attention = hidden * (heads * head_dim) * 2 + hidden * kv_heads * head_dim * 2
    per_layer = attention + 3 * hidden * inter + 2 * hidden
    tied = getattr(config, "tie_word_embeddings", False)
    params = layers * per_layer + vocab * hidden * (1 if tied else 2) + hidden
    return ModelSize(
        params=params,
        layers=layers,
        hidden=hidden,
        intermediate=inter,
        vocab=vocab,
        kv_width=kv_heads * head_dim,
        bytes_per_value=bytes_per_value,
    )
