"""The GPU decode step's Triton kernels against the torch forms they replace, one shape at a time.

Each kernel runs at a named model shape's sizes (orchestry/agents/lora/shapes.py), on random inputs:
- `sampler`: one token per row drawn with top-p (`device_sampler`'s torch form: the nucleus floor
  by bisection in torch ops and a cumsum pick) against `triton_sampler.pick` at each of `--ways`
  (thresholds a pass; `triton_sampler.WAYS` is the one decoding uses);
- `sample`: the same from the head's bfloat16 logits: torch's float copy, division and softmax,
  then `triton_sampler.pick` ("torch"), against `triton_sampler.sample` (softmax kernels, the
  first pass inside them) at a few warps and loads (`triton_sampler.WARPS`, `LOADS` decode);
- `attention`: one new column's attention over the KV cache (torch's SDPA with the boolean mask the
  torch form builds) against `triton_decode.decode_attention` at each of `--columns` per block
  (`triton_decode.COLUMNS` is the one decoding uses);
- `activation`: `silu(gate) * up` over the fused gate/up output against `triton_decode.silu_mul`;
- `activation_backward`: the update's form, forward and backward over `--update-tokens` tokens
  (torch's autograd of `silu(gate) * up` against `triton_decode.GatedSilu`);
- `lora_qkv`, `lora_o`: a projection with two adapters' LoRA (rank 16, rows alternating), torch's
  form (frozen GEMM, shrink GEMM, mask product, expand GEMM; o's into the residual) against one
  GEMM of the frozen weight with A under it and `triton_layer.lora_expand` at each of `--tiles`;
- `rms_norm`: torch's against `triton_layer.rms_norm`.

Every form is captured `--calls` times in one CUDA graph, as the decode step replays it, and the
graph is replayed `--repeats` times; the JSON holds microseconds a call (the median replay / calls)
and each kernel's ratio to its torch form in the same run.

    python benchmarks/decode_kernels.py --out results/bench/decode_kernels.json

This is a benchmark, not a test; it needs a GPU with Triton.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout, uninstalled

from orchestry.agents.lora.cuda import triton_decode, triton_layer, triton_sampler  # noqa: E402
from orchestry.agents.lora.cuda.device_sampler import torch_nucleus_floor  # noqa: E402
from orchestry.agents.lora.shapes import ModelShape, shape_named  # noqa: E402
from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402

LORA_RANK = 16
"""params.yaml's `model.lora.r`: each adapter's rank in every projection."""
STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def per_call_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Median microseconds a call of `fn`, captured `calls` times in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def torch_pick(probs: torch.Tensor, uniform: torch.Tensor, top_p: float) -> torch.Tensor:
    """`device_sampler.draw`'s torch form after the softmax."""
    kept = probs * (probs >= torch_nucleus_floor(probs, top_p))
    total = kept.cumsum(-1)
    return (total <= uniform[:, None] * total[:, -1:]).sum(-1)


def measure(name: str, args: argparse.Namespace) -> dict:
    shape = shape_named(name)
    rows, d = args.rows, shape.hidden // shape.heads
    gen = torch.Generator("cuda").manual_seed(0)
    timed = lambda fn: round(per_call_us(fn, args.calls, args.repeats), 2)  # noqa: E731
    out: dict[str, dict[str, float]] = {}

    logits = torch.randn((rows, shape.vocab), device="cuda", generator=gen) / args.temperature
    probs = logits.softmax(-1)
    uniform = torch.rand(rows, device="cuda", generator=gen)
    sampler = {"torch": timed(lambda: torch_pick(probs, uniform, args.top_p))}
    for ways in args.ways:
        sampler[f"ways_{ways}"] = timed(
            lambda w=ways: triton_sampler.pick(probs, uniform, args.top_p, ways=w)
        )
    out["sampler"] = sampler
    # from the head's bfloat16 logits: torch's float copy, division and softmax, then the pick,
    # against `triton_sampler.sample` (softmax kernels, pass 0 inside them) at a few tunings
    head = (logits * args.temperature).to(torch.bfloat16)
    t = args.temperature
    sample = {
        "torch": timed(
            lambda: triton_sampler.pick((head.float() / t).softmax(-1), uniform, args.top_p)
        )
    }
    for warps, loads, fused in (
        (1, 4, True),
        (1, 4, False),
        (2, 4, True),
        (4, 2, True),
        (1, 2, True),
    ):
        sample[f"warps_{warps}_loads_{loads}{'_fused' if fused else ''}"] = timed(
            lambda w=warps, n=loads, f=fused: triton_sampler.sample(
                head, uniform, t, args.top_p, warps=w, loads=n, fused=f
            )
        )
    out["sample"] = sample

    width = args.prompt + args.new
    column = torch.tensor([args.prompt + args.new // 2], device="cuda")
    q = torch.randn((rows, shape.heads, d), device="cuda", generator=gen, dtype=torch.bfloat16)
    cache = torch.randn(
        (2, rows, shape.kv_heads, width, d), device="cuda", generator=gen, dtype=torch.bfloat16
    )
    real = torch.ones((rows, width), dtype=torch.bool, device="cuda")
    real[: rows // 2, : args.prompt // 4] = False  # left padding of the shorter prompts
    mask = (real & (torch.arange(width, device="cuda") <= column))[:, None, None, :]
    group = shape.heads // shape.kv_heads
    attention = {
        "torch": timed(
            lambda: torch.nn.functional.scaled_dot_product_attention(
                q.view(rows, shape.kv_heads, group, d), cache[0], cache[1], attn_mask=mask
            )
        )
    }
    for columns in args.columns:
        attention[f"columns_{columns}"] = timed(
            lambda c=columns: triton_decode.decode_attention(q, cache, real, column, d**-0.5, c)
        )
    out["attention"] = attention

    y = torch.randn((rows, 2 * shape.intermediate), device="cuda", generator=gen)
    y = y.to(torch.bfloat16)
    gate, up = y.chunk(2, dim=-1)
    out["activation"] = {
        "torch": timed(lambda: torch.nn.functional.silu(gate) * up),
        "kernel": timed(lambda: triton_decode.silu_mul(y)),
    }
    y = torch.randn((args.update_tokens, 2 * shape.intermediate), device="cuda", generator=gen)
    y = y.to(torch.bfloat16).requires_grad_()
    grad = torch.randn((args.update_tokens, shape.intermediate), device="cuda", generator=gen)
    grad = grad.to(torch.bfloat16)

    def torch_form() -> object:
        gate, up = y.chunk(2, dim=-1)
        return torch.autograd.grad(torch.nn.functional.silu(gate) * up, y, grad)

    out["activation_backward"] = {
        "torch": timed(torch_form),
        "kernel": timed(lambda: torch.autograd.grad(triton_decode.GatedSilu.apply(y), y, grad)),
    }
    out.update(measure_layer(shape, rows, args.tiles, gen, timed))
    for row in out.values():
        for key in [k for k in row if k != "torch"]:
            row[f"{key}_vs_torch"] = round(row[key] / row["torch"], 3)
    return out


def measure_layer(
    shape: ModelShape,
    rows: int,
    tiles: list[tuple[int, int]],
    gen: torch.Generator,
    timed: Callable[[Callable[[], object]], float],
) -> dict[str, dict[str, float]]:
    """q/k/v's and o's projections with two adapters' LoRA (rank `LORA_RANK`, rows alternating):
    torch's form (frozen GEMM, shrink GEMM, mask product, expand GEMM) against the wide GEMM and
    `triton_layer.lora_expand` at each of `tiles` (rows x columns a program); and RMSNorm."""
    out: dict[str, dict[str, float]] = {}
    d = shape.hidden // shape.heads
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    x = torch.randn((rows, shape.hidden), generator=gen, **bf16)

    def projection(n: int, ranks: int, residual: torch.Tensor | None) -> dict[str, float]:
        w = torch.randn((n, shape.hidden), generator=gen, **bf16) * 0.02
        a = torch.randn((ranks, shape.hidden), generator=gen, **bf16) * 0.02
        b = torch.randn((n, ranks), generator=gen, **bf16) * 0.02
        wide = torch.cat([w, a])
        owner = torch.arange(ranks, device="cuda") // LORA_RANK % 2
        mask = (torch.arange(rows, device="cuda")[:, None] % 2 == owner[None, :]).to(x.dtype)

        def torch_form() -> object:
            y = x @ w.t() if residual is None else residual.addmm_(x, w.t())
            return y.addmm_((x @ a.t()) * mask, b.t())

        row = {"torch": timed(torch_form)}
        for bm, bn in tiles:
            row[f"tile_{bm}x{bn}"] = timed(
                lambda bm=bm, bn=bn: triton_layer.lora_expand(
                    x @ wide.t(), n, mask, b, residual, bm, bn
                )
            )
        return row

    out["lora_qkv"] = projection((shape.heads + 2 * shape.kv_heads) * d, 6 * LORA_RANK, None)
    residual = torch.randn((rows, shape.hidden), generator=gen, **bf16)
    out["lora_o"] = projection(shape.hidden, 2 * LORA_RANK, residual)
    h = torch.randn((rows, shape.hidden), generator=gen, **bf16)
    weight = torch.randn(shape.hidden, generator=gen, **bf16)
    out["rms_norm"] = {
        "torch": timed(lambda: torch.nn.functional.rms_norm(h, (shape.hidden,), weight, 1e-6)),
        "kernel": timed(lambda: triton_layer.rms_norm(h, weight, 1e-6)),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="qwen2.5-coder-3b,smollm2-135m")
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--prompt", type=int, default=256, help="prompt columns of the cache")
    parser.add_argument("--new", type=int, default=128, help="new-token columns of the cache")
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--ways", type=lambda s: [int(x) for x in s.split(",")], default=[4, 8, 16])
    parser.add_argument(
        "--columns", type=lambda s: [int(x) for x in s.split(",")], default=[32, 64, 128]
    )
    parser.add_argument(
        "--update-tokens",
        type=int,
        default=4096,
        help="tokens of an update pass (activation_backward): 32 rows x 128 new tokens",
    )
    parser.add_argument(
        "--tiles",
        type=lambda s: [tuple(int(v) for v in t.split("x")) for t in s.split(",")],
        default=[(64, 64), (128, 32), (32, 64), (128, 64)],
        help="rows x columns a lora_expand program covers",
    )
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available() or triton_decode.triton is None:
        sys.exit("decode_kernels.py needs a GPU and Triton")
    report = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "defaults": {
            "ways": triton_sampler.WAYS,
            "columns": triton_decode.COLUMNS,
            "tile": f"{triton_layer.ROWS}x{triton_layer.COLS}",
        },
        "shapes": {},
    }
    for name in args.shapes.split(","):
        report["shapes"][name] = measure(name, args)
        print(name, json.dumps(report["shapes"][name]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)


if __name__ == "__main__":
    main()
