"""The generation contract: who writes text, and how a caller asks for it.

Every agent backend (the LoRA team in `agents/lora`, the Claude agents in `agents/claude`) implements
`Generator`; the rollout tree and the evaluation protocols see only these types, so they never import
torch or an API client to get one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, kw_only=True)
class SamplingSpec:
    """How completions are sampled (values: params `sampling`, the one home of their defaults)."""

    temperature: float
    """Softmax temperature (sampling only)."""
    top_p: float
    """Nucleus sampling mass (1.0 = off)."""
    top_k: int
    """Keep the k most likely tokens (0 = off)."""
    max_new_tokens: int
    """Most tokens generated per completion."""
    do_sample: bool = True
    """False = greedy decoding."""
    min_new_tokens: int = 0
    """Fewest tokens before end-of-sequence may be sampled (benchmarks set it to max_new_tokens)."""
    stop: tuple[str, ...] = ()
    """Stop strings: a completion ends with the first token that completes one (tool calls'
    `</tool>`); its token ids end there too, so the update trains on exactly what was kept."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or not 0 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError(f"need 0 <= min_new_tokens <= max_new_tokens, 1 <= max: {self}")
        if self.do_sample and (self.temperature <= 0 or not 0 < self.top_p <= 1 or self.top_k < 0):
            raise ValueError(f"need temperature > 0, 0 < top_p <= 1, top_k >= 0 to sample: {self}")


@dataclass(frozen=True)
class GenRequest:
    """Sample `n` completions of one chat prompt under one agent's adapter."""

    agent: str
    messages: list[dict[str, str]]
    """Chat messages (role system/user/assistant, content); the chat template is applied here."""
    n: int


@dataclass
class Generation:
    """The completions of one `GenRequest`."""

    agent: str
    texts: list[str]
    """Decoded completions, special tokens stripped."""
    token_ids: list[list[int]]
    """New tokens of each completion, up to and including the first end-of-sequence token."""
    prompt_ids: list[int]
    """The templated prompt's token ids (no padding)."""
    seconds: float
    """Wall time of the batched generate call that produced these completions."""
    new_tokens: int
    """Total number of tokens in `token_ids`."""


class Generator(Protocol):
    """Anything that turns chat requests into sampled completions."""

    def generate(
        self, requests: Sequence[GenRequest], sampling: SamplingSpec
    ) -> list[Generation]: ...
