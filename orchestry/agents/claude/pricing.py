"""What a Claude call costs: list prices, token usage, and the worst-case bound on a request.

`ClaudeClient` checks every HTTP attempt against its budget with the worst case computed here:
an upper bound on the input tokens plus `max_tokens` output tokens. Claude's tokenizer is
byte-level, so a token covers at least one UTF-8 byte; the bound is the UTF-8 byte count of the
system prompt and the messages plus a fixed allowance for role markers (`worst_case_input_tokens`;
the count_tokens endpoint is not used, it would double the requests).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Prompt-cache tokens are priced relative to the input price (5-minute cache writes, cache reads).
CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1
# Upper bound on the tokens the API adds per message and per request (role markers, framing).
TOKENS_PER_MESSAGE = 8
TOKENS_PER_REQUEST = 16


@dataclass(frozen=True)
class TokenUsage:
    """Token counts as the API reports them."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


def worst_case_input_tokens(system: str, messages: Sequence[Mapping[str, Any]]) -> int:
    """An upper bound on the input tokens of a request (one token per UTF-8 byte, plus framing)."""
    texts = [system] + [_content_text(m["content"]) for m in messages]
    framing = TOKENS_PER_REQUEST + TOKENS_PER_MESSAGE * len(messages)
    return framing + sum(len(text.encode()) for text in texts)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def usage_cost(usage: TokenUsage, price: tuple[float, float]) -> float:
    """Dollars for the given usage at (input $/Mtok, output $/Mtok)."""
    input_price, output_price = price
    input_equivalent = (
        usage.input_tokens
        + CACHE_WRITE_FACTOR * usage.cache_creation_input_tokens
        + CACHE_READ_FACTOR * usage.cache_read_input_tokens
    )
    return (input_equivalent * input_price + usage.output_tokens * output_price) / 1e6
