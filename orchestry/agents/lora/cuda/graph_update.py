"""The update's passes as CUDA graphs: forward, the MAGRPO loss and backward recorded once per shape.

The written-out forward (`written_update`) put every adapter's rows in one pass, but a pass was still
launch-bound on a GPU: ~8,400 kernel launches and ~0.5 s of host time for ~0.17 s of kernels in a
step of 128 rows (`results/bench/gpu_step_ahead_profile.json`, #13). Here a pass is laid out in a
bucketed shape (rows and completion columns to multiples of `ROW_BUCKET` and `COMPLETION_BUCKET`,
distinct prompts to a power of two, prompt columns to `PROMPT_BUCKET`), copied into
static buffers, and its forward, per-row loss and backward are replayed from one recorded graph.

A padding row has no real completion token and a weight of 0, a padding prompt no real token, so
neither changes a real row's log-probs nor any gradient. The gradients come back per adapter
(`torch.autograd.grad`, not `.grad`, so the warm-up runs before a capture leave no trace); the caller
adds them to the adapters it holds rows of. On a CPU the same code runs eagerly and unpadded (nothing
is recorded there, and a bucketed shape of a few real rows is mostly padding: ten times the work in
the tests' passes); `PAD_ON_CPU` pads it as on a GPU, so the tests can check that padding changes
nothing against peft's per-adapter passes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from peft import PeftModel

from orchestry.agents.lora.cuda.written_update import PassInputs, WrittenForward, pass_inputs
from orchestry.agents.lora.engine import RowLoss
from orchestry.agents.lora.kv_prefix import upload

ROW_BUCKET = 32
"""A pass's rows are padded to a multiple of this many (padding rows weigh 0); a pass of fewer rows
to the next power of two. Padding a micro-batch of 16 rows to 32 doubled the completions' work and
memory: the 3B shape's planned 16 rows (`memory_plan`) took 1.75 s an update that way (issue 36)."""
PROMPT_BUCKET = 128
"""Prompts are left-padded to a multiple of this many columns."""
COMPLETION_BUCKET = 32
"""Completions are right-padded to a multiple of this many columns."""
KEPT_GRAPHS = 48
"""Recorded passes kept per model, the least recently used dropped first. Recording one costs about
1 s on an H100; 30 steps of the GPU benchmark met 2-3 shapes on-policy and ~6 with rollouts ahead.
The graphs share one memory pool, and each keeps only its inputs and its gradients (~15 MB at the
default LoRA)."""
RECORD = True
"""Whether passes on a GPU are recorded and replayed (False: run eagerly, for comparisons)."""
PAD_ON_CPU = False
"""Whether a pass on a CPU is laid out in the bucketed shape too (the tests' padding check)."""
WARMUP_RUNS = 2
"""Eager runs on a side stream before a capture (cuBLAS and autograd set up outside the graph)."""


@dataclass(frozen=True)
class PassShape:
    rows: int
    prompts: int
    prompt_width: int
    completion_width: int


def _up(n: int, step: int) -> int:
    return -(-n // step) * step


def pass_shape(
    prompts: Sequence[tuple], completions: Sequence[list[int]], bucketed: bool = True
) -> PassShape:
    """The bucketed shape of rows whose distinct (prompt, adapter) pairs are `prompts` (or, not
    `bucketed`, their own shape)."""
    if not bucketed:
        return PassShape(
            len(completions),
            len(prompts),
            max(len(p) for p, _ in prompts),
            max(map(len, completions)),
        )
    rows = len(completions)
    return PassShape(
        _up(rows, ROW_BUCKET) if rows > ROW_BUCKET // 2 else 1 << (rows - 1).bit_length(),
        1 << (len(prompts) - 1).bit_length(),
        _up(max(len(p) for p, _ in prompts), PROMPT_BUCKET),
        _up(max(map(len, completions)), COMPLETION_BUCKET),
    )


class GraphPass:
    """Static inputs and the recorded pass of one shape: per-row losses and each parameter's
    gradient of their sum, for rows weighted `weight` with advantages `adv`."""

    def __init__(
        self,
        forward: WrittenForward,
        adapters: list[str],
        params: list[torch.nn.Parameter],
        row_loss: RowLoss,
        inputs: PassInputs,
        pool: tuple | None,
        record: bool,
    ) -> None:
        self.forward, self.adapters, self.record = forward, adapters, record
        # Gradients are taken with respect to fresh leaves sharing the parameters' storage (they
        # see every optimizer step). A parameter's own autograd leaf may carry the legacy default
        # stream from earlier use, and a backward syncing with it cannot be captured.
        self.leaves = [p.detach().requires_grad_() for p in params]
        self.swap = {id(p): leaf for p, leaf in zip(params, self.leaves, strict=True)}
        self.row_loss, self.pool = row_loss, pool
        self.inputs = PassInputs(*(t.clone() for t in inputs.tensors()))
        rows = inputs.comp_ids.shape[0]
        self.adv = torch.zeros(rows, dtype=torch.float32, device=inputs.comp_ids.device)
        self.weight = torch.zeros_like(self.adv)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.outputs: tuple[torch.Tensor, tuple[torch.Tensor, ...]] | None = None

    def _run(self) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        with torch.enable_grad():
            logp, mask = self.forward.logprobs(self.adapters, self.inputs, self.swap)
            losses = self.row_loss(self.adv, logp.sum(-1), mask.sum(-1)) * self.weight
            grads = torch.autograd.grad(
                losses.sum(), self.leaves, allow_unused=True, materialize_grads=True
            )
        return losses.detach(), grads

    def __call__(
        self, inputs: PassInputs, adv: torch.Tensor, weight: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Per-row losses and the gradients. On a GPU they are the graph's own buffers, in the
        memory pool every pass of the model shares: read them before any pass runs again."""
        for static, value in zip(self.inputs.tensors(), inputs.tensors(), strict=True):
            static.copy_(value, non_blocking=True)
        self.adv.copy_(adv, non_blocking=True)
        self.weight.copy_(weight, non_blocking=True)
        if self.adv.device.type != "cuda" or not (RECORD and self.record):
            return self._run()
        if self.graph is None:
            self._capture()
        else:
            self.graph.replay()
        assert self.outputs is not None
        return self.outputs

    def _capture(self) -> None:
        device = self.adv.device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_RUNS):
                self._run()
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.outputs = self._run()
        graph.replay()  # the capture only records: this runs the pass
        self.graph = graph


class GraphUpdate:
    """The recorded passes of one model, by shape and adapters (least recently used dropped)."""

    def __init__(self, record: bool = True) -> None:
        self.record = record  # False: passes run eagerly (the memory plan found no room for pools)
        self._passes: OrderedDict[tuple, GraphPass] = OrderedDict()
        self._pool: tuple | None = None
        self._forward: WrittenForward | None = None

    def run(
        self,
        model: PeftModel,
        params: dict[str, list[torch.nn.Parameter]],
        row_adapter: Sequence[str],
        prompts: Sequence[list[int]],
        completions: Sequence[list[int]],
        adv: Sequence[float],
        weight: Sequence[float],
        row_loss: RowLoss,
        pad: int,
    ) -> torch.Tensor:
        """Per-row losses `row_loss` * weight of the rows (row i under adapter `row_adapter[i]`);
        the gradient of their sum is added to `.grad` of the parameters of each adapter with rows.
        `params` holds every adapter of the pass, in a fixed order (one shape for any mix)."""
        if self._forward is None:
            self._forward = WrittenForward(model)
        forward, names = self._forward, list(params)
        index = [names.index(a) for a in row_adapter]
        device = forward.embed.weight.device
        unique = list(dict.fromkeys((tuple(p), a) for p, a in zip(prompts, index, strict=True)))
        shape = pass_shape(unique, completions, device.type == "cuda" or PAD_ON_CPU)
        inputs = pass_inputs(
            index,
            prompts,
            completions,
            pad,
            device,
            (shape.rows, shape.prompts, shape.prompt_width, shape.completion_width),
        )
        padding = [0.0] * (shape.rows - len(index))
        values = torch.tensor([list(adv) + padding, list(weight) + padding], dtype=torch.float32)
        key = (shape, tuple(names), row_loss)
        if key in self._passes:
            self._passes.move_to_end(key)
        else:
            while len(self._passes) >= KEPT_GRAPHS:
                self._passes.popitem(last=False)
            if device.type == "cuda" and self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            flat = [p for a in names for p in params[a]]
            self._passes[key] = GraphPass(
                forward, names, flat, row_loss, inputs, self._pool, self.record
            )
        values = upload(values, device)
        losses, grads = self._passes[key](inputs, values[0], values[1])
        start = 0
        for k, name in enumerate(names):
            own = params[name]
            if k in index:
                for p in own:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                torch._foreach_add_([p.grad for p in own], list(grads[start : start + len(own)]))
            start += len(own)
        return losses[: len(index)].clone()
