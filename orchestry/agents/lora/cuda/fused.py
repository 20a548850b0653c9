"""Written-out linear layers shared by the decode step (`graph_decode`) and the update's forward
(`written_update`): a decoder layer's projections of one input as one matmul over their frozen
weights concatenated, every adapter's LoRA stacked beside it, and the rotary turn of queries and keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from peft.tuners.lora import LoraLayer

from orchestry.agents.lora.cuda.triton_layer import lora_expand
from orchestry.agents.lora.cuda.triton_support import usable


class Fused:
    """Projections of one input as one matmul, plus every adapter's LoRA terms, stacked.

    The frozen base weights are concatenated once ([q; k; v], [gate; up]); the adapters' A
    matrices are stacked over projections and adapters, their B matrices (scaled) laid out block
    diagonally, and a 0/1 mask per row keeps only the row's own adapter's blocks:
    y = x W^T + ((x A^T) * mask) B^T. A step then costs a few kernels per layer, not dozens.
    The stacked A sits under the frozen weight in one tensor (`wide`; `weight` and `a` are views
    of it), so on a GPU one GEMM writes [x W^T | x A^T] and `triton_layer.lora_expand` the rest.
    """

    def __init__(
        self, modules: Sequence[torch.nn.Module], adapters: Sequence[str], rows: int
    ) -> None:
        lora = [isinstance(m, LoraLayer) and bool(m.lora_A) for m in modules]
        bases = [m.base_layer if is_lora else m for m, is_lora in zip(modules, lora, strict=True)]
        self.weight, self.bias = frozen_concat(bases)
        self.modules = [m for m, is_lora in zip(modules, lora, strict=True) if is_lora]
        self.adapters = list(adapters)
        self.a: torch.Tensor | None = None
        if not self.modules:
            return
        dtype, device = self.weight.dtype, self.weight.device
        ranks = [[m.lora_A[n].weight.shape[0] for n in adapters] for m in self.modules]
        total = sum(map(sum, ranks))
        # A is stored under the frozen weight: one GEMM of `wide` gives [x W^T | x A^T]
        out = self.weight.shape[0]
        self.wide = torch.cat([self.weight, self.weight.new_zeros((total, self.weight.shape[1]))])
        self.weight, self.a = self.wide[:out], self.wide[out:]
        self.wide_bias = (
            None if self.bias is None else torch.cat([self.bias, self.bias.new_zeros(total)])
        )
        self.kernels = usable(self.wide)
        self.b = torch.zeros((self.weight.shape[0], total), dtype=dtype, device=device)
        # where each LoRA module's output rows and rank columns sit
        self.places, row, col = [], 0, 0
        for base, is_lora in zip(bases, lora, strict=True):
            out = base.weight.shape[0]
            if is_lora:
                width = sum(ranks[len(self.places)])
                self.places.append((slice(row, row + out), slice(col, col + width)))
                col += width
            row += out
        self.blocks = torch.cat(
            [torch.repeat_interleave(torch.arange(len(adapters)), torch.tensor(r)) for r in ranks]
        ).to(device)
        self.mask = torch.zeros((rows, 1, total), dtype=dtype, device=device)

    def refresh(self, row_adapter: torch.Tensor) -> None:
        """Copy the adapters' current weights in and route row i to adapter row_adapter[i]."""
        if self.a is None:
            return
        for m, (rows, cols) in zip(self.modules, self.places, strict=True):
            self.a[cols] = torch.cat([m.lora_A[n].weight for n in self.adapters], 0)
            self.b[rows, cols] = torch.cat(
                [m.lora_B[n].weight * m.scaling[n] for n in self.adapters], 1
            )
        self.mask.copy_((row_adapter[:, None] == self.blocks[None, :])[:, None, :])

    def __call__(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None = None,
        rows: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: [rows * tokens, in] -> [rows * tokens, out] (+ residual, in the same kernel); `rows`:
        which of the batch's rows x holds (None: all, in order), for their adapters' masks.

        Without a bias the sum is accumulated into `residual` itself (the caller's running hidden
        state, which it replaces by the result) and the LoRA term into the result: in place, a
        GEMM skips copying its addend first (four copies a layer and token in decoding at the 3B
        shape, issue 36); the values are those of the out-of-place `addmm`."""
        if self.a is not None and self.kernels and rows is None and x.shape[0] == len(self.mask):
            # a decode step on a GPU: the shrink in the frozen GEMM, the rest in one kernel
            wide = torch.nn.functional.linear(x, self.wide, self.wide_bias)
            return lora_expand(
                wide, len(self.weight), self.mask.view(len(self.mask), -1), self.b, residual
            )
        if residual is None or self.bias is not None:
            y = torch.nn.functional.linear(x, self.weight, self.bias)
            y = y if residual is None else y + residual
        else:
            y = residual.addmm_(x, self.weight.t())
        if self.a is not None:
            mask = self.mask if rows is None else self.mask.index_select(0, rows)
            low = (torch.mm(x, self.a.t()).view(mask.shape[0], -1, self.a.shape[0]) * mask).view(
                x.shape[0], -1
            )
            y.addmm_(low, self.b.t())
        return y


def frozen_concat(bases: Sequence[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The linears' frozen weights stacked over outputs, and their biases (None if none has one)."""
    weight = torch.cat([b.weight.detach() for b in bases], 0)
    if all(b.bias is None for b in bases):
        return weight, None
    biases = [
        b.bias.detach() if b.bias is not None else b.weight.new_zeros(b.weight.shape[0])
        for b in bases
    ]
    return weight, torch.cat(biases)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin
