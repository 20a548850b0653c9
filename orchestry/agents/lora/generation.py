"""Batched generation for `TeamPolicy`: one call over the rows of one base model.

`TeamPolicy.generate` (orchestry/agents/lora/team.py) groups the requests by base model (and, on
the static path, by adapter) and hands each group to `generate_group`, on one of three paths:

- eager (the CPU default): `generate` after prefilling each shared prompt prefix once
  (orchestry/agents/lora/kv_prefix.py), rows of several adapters through their own adapter in the
  same forward pass (orchestry/agents/lora/stacked_lora.py);
- graph (the CUDA default for Llama-style models): our own decode loop, every adapter's rows in one
  batch, one decode step replayed as a CUDA graph (orchestry/agents/lora/cuda/graph_decode.py,
  reached through orchestry/agents/lora/engine.py);
- static (CUDA, other models): `generate` on a static KV cache, which `transformers` compiles with
  `torch.compile`, one adapter per call.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedTokenizerBase

from orchestry.agents.base import Generation, GenRequest, SamplingSpec
from orchestry.agents.lora.engine import cuda_engine
from orchestry.agents.lora.head_sampler import HeadSampler
from orchestry.agents.lora.kv_prefix import cache_argument, pad_rows, plan_prefixes, prefill
from orchestry.agents.lora.loaded_base import LoadedBase
from orchestry.agents.lora.stacked_lora import stacked_lora

STATIC_PROMPT_BUCKET = 64
"""Static path: prompts are left-padded to a multiple of this, so the static cache has few shapes."""
PATHS = ("eager", "static", "graph")
MAX_ROWS = 1024
"""Rows generated in one batch at most: a group with more is generated in consecutive chunks. An
evaluation asks for every test problem's samples at once (248 problems x 8 samples x 2 agents is
3,968 rows), and one batch of 2,000 rows held ~55 GB of a GPU's memory; smaller calls, every call of
the CPU default included, are one batch as before, so their samples do not change."""


def generate_group(
    base: LoadedBase,
    requests: Sequence[GenRequest],
    prompts: list[list[int]],
    group: list[int],
    adapter_of: Mapping[str, str],
    activate: Callable[[str], None],
    sampling: SamplingSpec,
    path: str,
    max_rows: int = MAX_ROWS,
) -> list[Generation]:
    """The generations of `requests[i]` for i in `group`, in batches of at most `max_rows` rows
    (a request of more rows is one batch alone); see `generate_batch`."""
    out: list[Generation] = []
    chunk: list[int] = []
    rows = 0
    for i in group:
        if chunk and rows + requests[i].n > max_rows:
            out += generate_batch(
                base, requests, prompts, chunk, adapter_of, activate, sampling, path
            )
            chunk, rows = [], 0
        chunk.append(i)
        rows += requests[i].n
    return out + generate_batch(
        base, requests, prompts, chunk, adapter_of, activate, sampling, path
    )


def generate_batch(
    base: LoadedBase,
    requests: Sequence[GenRequest],
    prompts: list[list[int]],
    group: list[int],
    adapter_of: Mapping[str, str],
    activate: Callable[[str], None],
    sampling: SamplingSpec,
    path: str,
) -> list[Generation]:
    """The generations of `requests[i]` for i in `group`, all from one call on `base`.

    `adapter_of` maps an agent to its adapter name; `activate(adapter)` makes that adapter the
    active one of `base` (used when every row of the group has the same adapter). `path` is one
    of `PATHS` (see the module docstring); the static path needs one adapter per group.
    """
    rows = [prompts[i] for i in group for _ in range(requests[i].n)]
    adapters = [adapter_of[requests[i].agent] for i in group for _ in range(requests[i].n)]
    pad = base.tokenizer.pad_token_id
    kwargs: dict[str, object] = {}
    if path not in PATHS:
        raise ValueError(f"generation path must be one of {PATHS}, got {path!r}")
    base.model.eval()
    if path == "graph":  # the CUDA engine's decoder (on a CPU it runs eagerly: the tests)
        engine, decoders = cuda_engine(), base.decoder_cache()
        _synchronize(base.device)
        start = time.perf_counter()
        decoder = decoders.get(base.model, base.adapters, engine.decode_shape(rows, sampling))
        index = [base.adapters.index(a) for a in adapters]
        new = decoder.run(rows, index, pad, base.stop_ids)
        return _generations(
            base, requests, prompts, group, new, time.perf_counter() - start, sampling.stop
        )
    # rows of several adapters: each row through its own (orchestry/agents/lora/stacked_lora.py)
    route = (lambda names: stacked_lora(base.model, names)) if len(set(adapters)) > 1 else None
    if route is None:
        activate(adapters[0])
    static = path == "static"
    config, warpers = _generation_config(base, sampling, static)
    _synchronize(base.device)
    start = time.perf_counter()
    if static:
        width = -(-max(map(len, rows)) // STATIC_PROMPT_BUCKET) * STATIC_PROMPT_BUCKET
        input_ids, attention_mask = pad_rows(rows, width, pad, base.device)
    else:  # eager: prefill each shared prompt prefix once (orchestry/agents/lora/kv_prefix.py)
        plan = plan_prefixes(rows, adapters, sampling.max_new_tokens)
        input_ids, attention_mask, kwargs[cache_argument(base.model)] = prefill(
            base.model, plan, pad, base.device, sampling.max_new_tokens, route
        )
        width = input_ids.shape[1]
    with torch.no_grad(), route(adapters) if route else contextlib.nullcontext():
        out = base.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            generation_config=config,
            logits_processor=warpers,
            **kwargs,
        )
    _synchronize(base.device)
    seconds = time.perf_counter() - start
    return _generations(
        base, requests, prompts, group, out[:, width:].tolist(), seconds, sampling.stop
    )


def _generations(
    base: LoadedBase,
    requests: Sequence[GenRequest],
    prompts: list[list[int]],
    group: list[int],
    new: list[list[int]],
    seconds: float,
    stop: tuple[str, ...] = (),
) -> list[Generation]:
    """`new` (the rows' new tokens, in group order, n per request) cut at stop tokens and at the
    first token completing a stop string, decoded."""
    generations, row = [], 0
    for i in group:
        ids = [_cut_at_stop(new[row + k], base.stop_ids) for k in range(requests[i].n)]
        if stop:
            ids = [_cut_at_string(x, stop, base.tokenizer) for x in ids]
        row += requests[i].n
        texts = base.tokenizer.batch_decode(ids, skip_special_tokens=True)
        generations.append(
            Generation(
                agent=requests[i].agent,
                texts=texts,
                token_ids=ids,
                prompt_ids=prompts[i],
                seconds=seconds,
                new_tokens=sum(map(len, ids)),
            )
        )
    return generations


def _generation_config(
    base: LoadedBase, sampling: SamplingSpec, static: bool
) -> tuple[GenerationConfig, LogitsProcessorList]:
    """The generate settings and the logits processors.

    Sampling is done by our `HeadSampler` (orchestry/agents/lora/head_sampler.py), which leaves only the drawn
    token finite; transformers then runs in greedy mode and picks it.
    """
    config = GenerationConfig(
        max_new_tokens=sampling.max_new_tokens,
        min_new_tokens=sampling.min_new_tokens,
        do_sample=False,
        pad_token_id=base.tokenizer.pad_token_id,
        eos_token_id=sorted(base.stop_ids),
        cache_implementation="static" if static else None,
    )
    warpers = LogitsProcessorList()
    if sampling.do_sample:
        warpers.append(HeadSampler(sampling.temperature, sampling.top_k, sampling.top_p))
    return config, warpers


def _cut_at_stop(ids: list[int], stop_ids: set[int]) -> list[int]:
    for k, token in enumerate(ids):
        if token in stop_ids:
            return ids[: k + 1]
    return ids


def _cut_at_string(
    ids: list[int], stop: tuple[str, ...], tokenizer: PreTrainedTokenizerBase
) -> list[int]:
    """`ids` up to the first token whose decoded prefix holds a stop string (binary search: once a
    prefix holds one, every longer prefix does)."""

    def holds(n: int) -> bool:
        text = tokenizer.decode(ids[:n], skip_special_tokens=True)
        return any(s in text for s in stop)

    if not holds(len(ids)):
        return ids
    low, high = 1, len(ids)
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if holds(mid) else (mid + 1, high)
    return ids[:low]


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
