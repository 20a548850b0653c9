"""Claude models as the team's agents: `ClaudeAgents` implements `orchestry.agents.base.Generator`.

API version 2026-10-21 has no sampling parameters, so only `max_new_tokens` of the sampling spec
applies; the client's cache is what makes a rerun reproduce the replies.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from orchestry.agents.base import Generation, GenRequest, SamplingSpec
from orchestry.agents.claude.client import ClaudeClient


def split_system(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Chat messages -> (system prompt, user/assistant messages) as the Messages API wants them."""
    system = ""
    rest = list(messages)
    if rest and rest[0].get("role") == "system":
        system = rest.pop(0)["content"]
    for index, message in enumerate(rest):
        if message.get("role") not in ("user", "assistant"):
            raise ValueError(
                f"message {index} has role {message.get('role')!r}; after an optional leading "
                "system message only 'user' and 'assistant' are allowed"
            )
    if not rest or rest[0]["role"] != "user":
        raise ValueError("the Messages API needs at least one message, starting with 'user'")
    return system, [{"role": m["role"], "content": m["content"]} for m in rest]


class ClaudeAgents:
    """The team's agents played by a Claude model, with the local policy's `generate` shape."""

    def __init__(self, client: ClaudeClient, agents: Sequence[str]) -> None:
        if not agents or len(set(agents)) != len(agents):
            raise ValueError(f"agents must be a non-empty list of unique names, got {list(agents)}")
        self.client = client
        self.agents = tuple(agents)

    def generate(self, requests: Sequence[GenRequest], sampling: SamplingSpec) -> list[Generation]:
        """n completions per request, one API call each (the API has no n); in request order.

        Only `sampling.max_new_tokens` applies: API version 2026-10-21 has no temperature, top_p
        or top_k, so the model samples with its own settings. The API gives no token ids:
        `token_ids` and `prompt_ids` are empty lists and `new_tokens` is the output token count
        from usage. Calls are sequential.
        """
        for request in requests:
            if request.agent not in self.agents:
                raise ValueError(f"unknown agent {request.agent!r}; agents are {list(self.agents)}")
            if request.n < 1:
                raise ValueError(f"request for {request.agent!r} asks for n={request.n} samples")
        generations = []
        for request in requests:
            system, messages = split_system(request.messages)
            start = time.perf_counter()
            replies = [
                self.client.complete(
                    system,
                    messages,
                    max_tokens=sampling.max_new_tokens,
                    sample_index=index,
                )
                for index in range(request.n)
            ]
            generations.append(
                Generation(
                    agent=request.agent,
                    texts=[reply.text for reply in replies],
                    token_ids=[],
                    prompt_ids=[],
                    seconds=time.perf_counter() - start,
                    new_tokens=sum(reply.usage.output_tokens for reply in replies),
                )
            )
        return generations
