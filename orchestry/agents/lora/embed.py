"""State embeddings from the frozen base model: what a learned orchestrator reads.

The base model's last hidden layer (after its final norm), averaged over the tokens of a text, with
every LoRA adapter switched off: the agents' training never moves the orchestrator's view of a task.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from orchestry.agents.lora.team import TeamPolicy


def mean_hidden_states(
    policy: TeamPolicy, agent: str, texts: Sequence[str], max_tokens: int
) -> torch.Tensor:
    """[len(texts), hidden] float32 on the CPU: each text's mean last hidden state under the base
    model of `agent` (adapters disabled), the text cut to its first `max_tokens` tokens.

    One forward pass per text (no padding, so a text's embedding does not depend on its batch).
    """
    if not texts:
        raise ValueError("mean_hidden_states needs at least one text")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    model, tokenizer = policy.peft_model(agent), policy.tokenizer(agent)
    device = next(model.parameters()).device
    rows = []
    with torch.no_grad(), model.disable_adapter():
        for text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens] or [
                tokenizer.eos_token_id
            ]
            out = model(input_ids=torch.tensor([ids], device=device), output_hidden_states=True)
            rows.append(out.hidden_states[-1][0].float().mean(dim=0).cpu())
    return torch.stack(rows)
