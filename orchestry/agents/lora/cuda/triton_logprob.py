"""Per-token log-probs of the chosen tokens from the head's logits, forward and backward as Triton
kernels, for the update's written-out forward (`written_update`) on a GPU.

Torch's form, `logits.float()`, `gather`, `logsumexp` and their backward, makes a float32 copy of
[tokens, vocab] and passes over it about ten times: at the 3B shape (vocabulary 151,936, 4,096
completion tokens a microbatch) a copy is 2.5 GB, and these passes were ~40-50 ms of the update's
~0.75 s of kernels on an H200 (issue 36, 447f04e's profile). Here the forward reads the bfloat16
logits once (a program per token: the maximum and the sum of exponentials kept online over blocks
of the vocabulary, in float32) and writes the log-prob and the log-sum-exp; the backward reads
them once more and writes the gradient, g * (onehot - softmax), in the logits' dtype, rounded
once from float32 as torch's form rounds it.
"""

from __future__ import annotations

import torch

from orchestry.agents.lora.cuda.triton_support import tl, triton

BLOCK = 4096
"""Vocabulary entries a program reads at a time."""

if triton is not None:

    @triton.jit
    def logprob_kernel(
        logits, targets, out, lse, vocab, row_stride, BLOCK: tl.constexpr
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        base = logits + row * row_stride
        top = tl.full([], -1.0e30, tl.float32)  # finite: exp(top - new) is never exp(-inf + inf)
        total = tl.zeros([], tl.float32)
        for start in range(0, vocab, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(base + cols, mask=cols < vocab, other=-float("inf")).to(tl.float32)
            new = tl.maximum(top, tl.max(x, axis=0))
            total = total * tl.exp(top - new) + tl.sum(tl.exp(x - new), axis=0)
            top = new
        log_z = top + tl.log(total)
        chosen = tl.load(base + tl.load(targets + row)).to(tl.float32)
        tl.store(out + row, chosen - log_z)
        tl.store(lse + row, log_z)

    @triton.jit
    def logprob_backward_kernel(
        logits, targets, lse, grad, dlogits, vocab, row_stride, d_stride, BLOCK: tl.constexpr
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = cols < vocab
        x = tl.load(logits + row * row_stride + cols, mask=inside, other=0.0).to(tl.float32)
        g = tl.load(grad + row)
        hit = (cols == tl.load(targets + row)).to(tl.float32)
        d = g * (hit - tl.exp(x - tl.load(lse + row)))
        tl.store(dlogits + row * d_stride + cols, d.to(dlogits.dtype.element_ty), mask=inside)


class TokenLogprobs(torch.autograd.Function):
    """logits [tokens, vocab] (any float dtype, rows contiguous), targets [tokens] (int64) ->
    log softmax(logits)[target] per token, float32 [tokens], differentiable in the logits."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, logits: torch.Tensor, targets: torch.Tensor
    ) -> torch.Tensor:
        tokens, vocab = logits.shape
        assert logits.stride(1) == 1 and targets.shape == (tokens,)
        targets = targets.contiguous()
        out = torch.empty(tokens, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)
        logprob_kernel[(tokens,)](
            logits, targets, out, lse, vocab, logits.stride(0), BLOCK=BLOCK, num_warps=8
        )
        ctx.save_for_backward(logits, targets, lse)
        return out

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        logits, targets, lse = ctx.saved_tensors
        tokens, vocab = logits.shape
        grad = grad.float().contiguous()
        dlogits = torch.empty((tokens, vocab), dtype=logits.dtype, device=logits.device)
        logprob_backward_kernel[(tokens, triton.cdiv(vocab, BLOCK))](
            logits, targets, lse, grad, dlogits, vocab, logits.stride(0), dlogits.stride(0),
            BLOCK=BLOCK, num_warps=8,
        )  # fmt: skip
        return dlogits, None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [..., vocab], targets [...] -> float32 log-probs [...] of the targets (`TokenLogprobs`
    over the flattened tokens)."""
    flat = TokenLogprobs.apply(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return flat.view(targets.shape)
