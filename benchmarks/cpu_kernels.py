"""How far the CPU step can shrink: the embedded model's matrix products on this machine's cores.

A CPU decode step of the embedded model is its linear layers at a few rows (weights read once per
step, so memory-bound); the update is the same layers over the prompt and completion tokens
(compute-bound). This script times one decode step's products (every linear layer of every block
plus the tied head, at --rows rows) and one update forward's (at --tokens tokens) in the storage
formats torch can run on a CPU:

- `float32`: dense, what the CPU default runs;
- `bfloat16`: dense, half the bytes (`model.dtype: bfloat16`);
- `int4_bf16` / `int4_fp32`: the GGUF's own Q4_1 weights (4-bit values, a scale and a minimum per 32
  weights, mapped exactly onto torch's `_weight_int4pack_mm_for_cpu` groups: scale d, zero m + 8d),
  with bfloat16 or float32 activations. The head (the GGUF's Q8_0 token embedding, tied)
  stays dense in every format.

The shapes are read from the loaded model. Each product is timed as the median of --repeats runs
after a warm-up; the JSON holds ms per decode step and per update forward, and each format's ratio
against float32 in the same run.

    python benchmarks/cpu_kernels.py --out results/bench/cpu_kernels.json

This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from orchestry.agents.lora.base_model import load_base_model
from orchestry.bookkeeping.provenance import write_bench_manifest
from orchestry.params import Params
from orchestry.stages.from_params import model_spec

GROUP = 32  # Q4_1's block: 32 weights share a scale and a minimum
FORMATS = ("float32", "bfloat16", "int4_bf16", "int4_fp32")

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def layer_shapes(model: torch.nn.Module) -> tuple[list[tuple[int, int]], tuple[int, int]]:
    """(out, in) of every linear layer in the blocks, and of the head."""
    blocks = [
        tuple(m.weight.shape)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and "layers." in name
    ]
    head = model.get_output_embeddings().weight.shape
    return blocks, (int(head[0]), int(head[1]))


def q4_1(
    out: int, inp: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random Q4_1-style weights: values 0..15, a scale and a minimum per GROUP inputs."""
    q = torch.randint(0, 16, (out, inp), generator=gen, dtype=torch.int32)
    scale = torch.rand(out, inp // GROUP, generator=gen) * 0.01 + 1e-3
    low = -8 * scale + torch.randn(out, inp // GROUP, generator=gen) * 1e-3
    return q, scale, low


def products(fmt: str, shapes: list[tuple[int, int]], gen: torch.Generator) -> list[Any]:
    """One callable per layer: x -> x @ W^T in the format."""
    calls = []
    for out, inp in shapes:
        if fmt in ("float32", "bfloat16"):
            w = torch.randn(out, inp, generator=gen).to(getattr(torch, fmt))
            calls.append(lambda x, w=w: x @ w.t())
            continue
        q, scale, low = q4_1(out, inp, gen)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
        dtype = torch.bfloat16 if fmt == "int4_bf16" else torch.float32
        # torch's groups dequantise as (q - 8) * scale + zero; Q4_1's as q * d + m: zero = m + 8 d
        sz = torch.stack([scale.t(), (low + 8 * scale).t()], -1).contiguous().to(dtype)
        calls.append(
            lambda x, p=packed, sz=sz: torch.ops.aten._weight_int4pack_mm_for_cpu(x, p, GROUP, sz)
        )
    return calls


def time_pass(calls: list[Any], x_of: dict[int, torch.Tensor], shapes, repeats: int) -> float:
    """Median seconds of one pass through every product."""
    runs = []
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        for call, (_, inp) in zip(calls, shapes, strict=True):
            call(x_of[inp])
        if i:  # the first is the warm-up
            runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def measure(fmt: str, blocks, head, rows: int, tokens: int, repeats: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    act = torch.bfloat16 if fmt in ("bfloat16", "int4_bf16") else torch.float32
    block_calls = products(fmt, blocks, gen)
    head_dense = products("bfloat16" if act == torch.bfloat16 else "float32", [head], gen)
    widths = {inp for _, inp in blocks} | {head[1]}
    result: dict[str, float] = {}
    for label, m in (("decode_step_ms", rows), ("update_forward_ms", tokens)):
        if label == "update_forward_ms" and fmt == "int4_fp32":
            continue  # minutes at this size; the decode step already shows the kernel
        x_of = {w: torch.randn(m, w, generator=gen).to(act) for w in widths}
        s = time_pass(block_calls, x_of, blocks, repeats)
        s += time_pass(head_dense, x_of, [head], repeats)
        result[label] = round(1000 * s, 2)
    weight_bytes = sum(o * i for o, i in blocks) * {"float32": 4, "bfloat16": 2}.get(fmt, 0.5)
    result["block_weight_mb"] = round(weight_bytes / 2**20, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--rows", type=int, default=8, help="rows of a decode step (one agent's call)"
    )
    parser.add_argument("--tokens", type=int, default=1800, help="tokens of an update forward")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--formats", default=",".join(FORMATS))
    args = parser.parse_args()
    model, _ = load_base_model(model_spec(Params()))
    blocks, head = layer_shapes(model)
    del model
    table: dict[str, dict[str, float]] = {}
    for fmt in args.formats.split(","):
        table[fmt] = measure(fmt, blocks, head, args.rows, args.tokens, args.repeats)
        print(fmt, table[fmt], flush=True)
    base = table.get("float32")
    if base:
        for row in table.values():
            for key in ("decode_step_ms", "update_forward_ms"):
                if key in row:
                    row[key.replace("_ms", "_vs_float32")] = round(row[key] / base[key], 3)
    report = {
        "settings": {"rows": args.rows, "tokens": args.tokens, "repeats": args.repeats},
        "shapes": {"block_layers": len(blocks), "head": head},
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "load_average": os.getloadavg(),
        },
        "formats": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)


if __name__ == "__main__":
    main()
