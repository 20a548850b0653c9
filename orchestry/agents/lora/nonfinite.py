"""Where a non-finite loss or gradient comes from: the first adapter parameter, the row, the token.

When an update's loss or gradient norm is not finite, `pg_update` stops training; this module says
where. The parameter is read from the `.grad` the failed update left. The row and token position are
found again on the plain forward (peft's, one row at a time, whatever path the update took): a row's
loss is recomputed, and the gradient reaching its input embeddings shows the first token position
where the non-finite values enter. A zero embedding row (random initialisation zeroes the row of
`config.pad_token_id`) at position 0 gives exactly that in deep models (issue 36).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

MAX_ROWS_CHECKED = 64
"""Rows re-run one at a time to find the bad one (the search stops at the first)."""


@dataclass(frozen=True)
class NonFiniteRow:
    """A row whose loss or gradient is non-finite on the plain forward, and the first bad token."""

    row: int
    """Index into the rows given (the adapter's live rows of the failed step, in update order)."""
    position: int | None
    """Token position in prompt + completion (None: the row is bad, no position stands out)."""
    token_id: int | None
    in_prompt: bool
    what: str
    """"loss" (non-finite logits) or "gradient" (non-finite gradient at the input embeddings)."""


def first_nonfinite_grad(named: Sequence[tuple[str, torch.nn.Parameter]]) -> str | None:
    """The name of the first parameter whose `.grad` holds a non-finite value, or None."""
    for name, param in named:
        if param.grad is not None and not bool(torch.isfinite(param.grad).all()):
            return name
    return None


def find_nonfinite_row(
    model: PeftModel,
    params: Sequence[torch.nn.Parameter],
    rows: Sequence[tuple[list[int], list[int]]],
) -> NonFiniteRow | None:
    """The first of `rows` (prompt, completion) whose completion log-prob or its gradient (to the
    input embeddings and `params`) is non-finite under the active adapter, or None. No `.grad`
    is touched (`torch.autograd.grad`)."""
    device = next(model.parameters()).device
    embed = model.get_input_embeddings()
    was_training = model.training
    model.eval()  # no dropout: the same forward each time
    try:
        for index, (prompt, completion) in enumerate(rows[:MAX_ROWS_CHECKED]):
            ids = torch.tensor([[*prompt, *completion]], device=device)
            inputs = embed(ids).detach().requires_grad_(True)
            logits = model(inputs_embeds=inputs).logits.float()[0]
            start = len(prompt) - 1  # the logits at position t predict token t + 1
            logp = logits[start : start + len(completion)].log_softmax(-1)
            loss = -logp.gather(-1, ids[0, len(prompt) :, None]).mean()
            bad_logits = ~torch.isfinite(logits).all(-1)
            if bool(bad_logits.any()) or not bool(torch.isfinite(loss)):
                return _site(index, bad_logits, ids, len(prompt), "loss")
            grads = torch.autograd.grad(loss, [inputs, *params], allow_unused=True)
            bad_positions = ~torch.isfinite(grads[0][0]).all(-1)
            bad_params = any(g is not None and not bool(torch.isfinite(g).all()) for g in grads)
            if bool(bad_positions.any()) or bad_params:
                return _site(index, bad_positions, ids, len(prompt), "gradient")
    finally:
        model.train(was_training)
    return None


def _site(
    index: int, bad: torch.Tensor, ids: torch.Tensor, prompt_len: int, what: str
) -> NonFiniteRow:
    positions = bad.nonzero().flatten().tolist()
    if not positions:
        return NonFiniteRow(index, None, None, False, what)
    position = positions[0]
    token = int(ids[0, position])
    return NonFiniteRow(index, position, token, position < prompt_len, what)


def describe(
    site: NonFiniteRow | None,
    n_rows: int,
    tokenizer: PreTrainedTokenizerBase,
    embedding: torch.Tensor,
) -> str:
    """The row and token in words, with a hint when the token's embedding row is all zeros."""
    if site is None:
        checked = min(n_rows, MAX_ROWS_CHECKED)
        return f"not reproduced on the plain forward of {checked} of {n_rows} rows one at a time"
    text = f"row {site.row} of {n_rows}: non-finite {site.what}"
    if site.position is None:
        return text + " (no single token position stands out)"
    part = "prompt" if site.in_prompt else "completion"
    token = tokenizer.convert_ids_to_tokens(site.token_id)
    text += f" first at token position {site.position} ({part}; id {site.token_id} {token!r})"
    if site.token_id is not None and not bool(embedding[site.token_id].any()):
        text += (
            "; that token's embedding row is all zeros (random initialisation zeroes the row "
            "of config.pad_token_id: fill it)"
        )
    return text
