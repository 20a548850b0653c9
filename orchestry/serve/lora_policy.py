"""What the server uses of the LoRA team (`agents/lora/team.TeamPolicy`) beyond the Generator
contract: per-request seeds, plain-text prompts, prompt lengths and the context, and per-token
streaming. Duck-typed, so the server imports no torch; the composition root
(`bookkeeping/commands.py`) hands these to `models.Served`.

- Seeds: the policy samples its k-th generate call from (seed, k) (`TeamPolicy._call_seed`); a
  seeded request's calls run with the request's seed and its own count, and the policy's stream
  goes on after as if they never ran.
- Plain-text prompts (`/v1/completions`): the policy's `prompt_ids` reads a lone message of role
  `models.TEXT_ROLE` as text, tokenized as the tokenizer does by default, without the chat
  template; every other prompt is read as before.
- Streaming: transformers' `generate(..., streamer=s)` calls `s.put(prompt rows)` once, then
  `s.put(new tokens)` after each decode step, one per row. The policy's eager (CPU) and static
  paths call each base model's `generate` (`agents/lora/generation.py`); within `streaming`, that
  call gets the streamer. The CUDA graph path decodes in its own loop and reports no step: its
  text comes at the end.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from orchestry.serve.models import TEXT_ROLE, Seeded, Streaming

MIN_PROMPT_TOKENS = 2
"""The eager path prefills all of a prompt but its last token, then decodes from that token
(`agents/lora/kv_prefix.plan_prefixes`): a one-token text prompt cannot be split so."""


def seeding(policy: Any) -> Seeded:
    """`seeded(seed, calls)` over the policy's own stream (see `models.Seeded`)."""

    @contextmanager
    def seeded(seed: int, calls: int) -> Iterator[None]:
        stream = policy.seed, policy.generate_calls
        policy.seed, policy.generate_calls = seed, calls
        try:
            yield
        finally:
            policy.seed, policy.generate_calls = stream

    return seeded


def read_text_prompts(policy: Any) -> None:
    """From now on the policy reads a lone TEXT_ROLE message as a plain-text prompt."""
    chat = policy.prompt_ids

    def prompt_ids(agent: str, messages: list[dict[str, str]]) -> list[int]:
        if [m["role"] for m in messages] == [TEXT_ROLE]:
            return list(policy.tokenizer(agent)(messages[0]["content"])["input_ids"])
        return chat(agent, messages)

    policy.prompt_ids = prompt_ids


def prompt_length(policy: Any) -> Callable[[str, list[dict[str, str]]], int]:
    return lambda agent, messages: len(policy.prompt_ids(agent, messages))


def context(policy: Any, agents: Sequence[str]) -> int | None:
    """The most tokens every agent's base model reads at once (its positions), if they say."""
    configs = [policy.peft_model(a).get_base_model().config for a in agents]
    sizes = [getattr(c, "max_position_embeddings", None) for c in configs]
    return min((s for s in sizes if s), default=None)


def token_decoder(policy: Any) -> Callable[[str, list[int]], str]:
    """`decode(agent, ids)`: the text of the tokens so far, as the policy decodes a completion
    (up to its first end-of-sequence token, special tokens skipped)."""

    @functools.cache
    def ends(agent: str) -> frozenset[int]:
        eos = policy.peft_model(agent).generation_config.eos_token_id
        eos = list(eos) if isinstance(eos, list | tuple) else [eos]
        return frozenset(i for i in (policy.tokenizer(agent).eos_token_id, *eos) if i is not None)

    def decode(agent: str, ids: list[int]) -> str:
        stop = ends(agent)
        end = next((k + 1 for k, token in enumerate(ids) if token in stop), len(ids))
        return policy.tokenizer(agent).decode(ids[:end], skip_special_tokens=True)

    return decode


class _Streamer:
    """transformers' streamer protocol (`put`, `end`): each decode step's tokens to `on_step`."""

    def __init__(self, on_step: Callable[[list[int]], None]) -> None:
        self.on_step = on_step

    def put(self, value: Any) -> None:
        rows = value.tolist()
        if rows and isinstance(rows[0], list):  # the prompt rows, put once before the steps
            return
        self.on_step(rows)

    def end(self) -> None:
        pass


def token_streaming(policy: Any, agents: Sequence[str]) -> Streaming:
    """`streaming(on_step)`: each base model's `generate` streams its steps to `on_step`."""
    models = list({id(m): m for m in (policy.peft_model(a) for a in agents)}.values())

    @contextmanager
    def streaming(on_step: Callable[[list[int]], None]) -> Iterator[None]:
        streamer = _Streamer(on_step)
        for model in models:
            model.generate = functools.partial(model.generate, streamer=streamer)
        try:
            yield
        finally:
            for model in models:
                del model.generate  # the class's method again

    return streaming
