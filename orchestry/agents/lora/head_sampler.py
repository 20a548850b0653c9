"""Token sampling for `generate`: temperature, top-k and top-p, drawn from the head of the vocabulary.

transformers samples with a multinomial over the whole vocabulary (49k tokens) after its warpers
sort it for top-p; on a CPU that costs ~0.2 s per step for 64 rows, as much as the model's
forward. `HeadSampler` is a logits processor that draws the token itself from the few hundred most
likely tokens (where the nucleus almost always lies) and leaves only that token finite, so
`generate` runs in greedy mode and simply picks it. The rule is transformers' (temperature, then
top-k renormalised, then top-p keeping a token while the mass ranked above it is < top_p); a step
whose head holds less than top_p of some row's mass sorts the full vocabulary instead.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

HEAD = 256


class HeadSampler(LogitsProcessor):
    def __init__(self, temperature: float, top_k: int, top_p: float, head: int = HEAD) -> None:
        if temperature <= 0 or not 0 < top_p <= 1 or top_k < 0:
            raise ValueError(
                f"bad sampling settings: T={temperature}, top_k={top_k}, top_p={top_p}"
            )
        self.temperature, self.top_k, self.top_p, self.head = temperature, top_k, top_p, head

    def candidates(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, probabilities) per row, most likely first; tokens outside the nucleus get 0."""
        logits = scores.float() / self.temperature
        vocab = logits.shape[-1]
        limit = min(self.top_k or vocab, vocab)
        norm = logits.topk(limit, dim=-1).values if limit < vocab else logits
        log_z = norm.logsumexp(-1, keepdim=True)  # top-k renormalises over the k kept tokens
        size = min(self.head, limit) if self.top_p < 1.0 else limit
        top, index = logits.topk(size, dim=-1)
        probs = (top - log_z).exp()
        if size < limit and not bool((probs.sum(-1) >= self.top_p).all()):
            top, index = logits.topk(limit, dim=-1)  # rare: a flat distribution, sort it all
            probs = (top - log_z).exp()
        above = probs.cumsum(-1) - probs  # probability mass ranked above each token
        keep = above < self.top_p
        keep[:, 0] = True  # at least one token
        return index, probs * keep

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """-inf everywhere except the drawn token of each row (0 there)."""
        if self.top_p >= 1.0 and not self.top_k:  # plain temperature sampling: nothing to cut
            drawn = torch.multinomial((scores.float() / self.temperature).softmax(-1), 1)
        else:
            index, weights = self.candidates(scores)
            drawn = index.gather(-1, torch.multinomial(weights, 1))
        return torch.full_like(scores, -float("inf")).scatter_(-1, drawn, 0.0)
