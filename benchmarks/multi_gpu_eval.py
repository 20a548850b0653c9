"""Data-parallel evaluation: one evaluation stage at 1 and at W processes (`evaluate.processes`).

Runs `python -m orchestry baseline --name <method>` (the stage itself, as dvc and snakemake run it) in a
scratch copy of the code and data, with `evaluate.processes` 1 and W, on the prepared test split
(data/prepared/test.jsonl), twice each (the first run converts the model into the cache; the second
pair is the one reported), and writes each run's wall time (model loading included), its metrics and
the stage's timing lines. Every run must cover the same (problem, sample) pairs in the same order;
the samples differ (each rank has its own batch and sampling stream), so the metrics agree only
within the CIs.

    python benchmarks/multi_gpu_eval.py --world 2     # 2 GPUs: results/bench/multi_gpu_eval.json
    python benchmarks/multi_gpu_eval.py --device cpu --dtype float32 --world 2 \
        --set evaluate.n_samples=1 --set sampling.max_new_tokens=16 --out /tmp/multi_gpu_eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from timed_train import override  # noqa: E402

from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402
from orchestry.params import parse_params  # noqa: E402

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def run_stage(work: Path, params: dict, method: str) -> dict:
    """The baseline stage in `work` (a copy of the repository's code and prepared data)."""
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.rmtree(work / "results", ignore_errors=True)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestry", "baseline", "--name", method],
        cwd=work,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"baseline {method} failed:\n{proc.stderr[-4000:]}")
    out = work / "results" / "baselines" / method
    rows = [json.loads(line) for line in (out / "generations.jsonl").open()]
    keep = ("starting", "generating", "generated", "scored", "loaded", "graph")
    return {
        "processes": params["evaluate"]["processes"],
        "seconds": seconds,
        # the stage's own timings (generation and the sandbox of each rank-0 call)
        "log": [line for line in proc.stderr.splitlines() if any(k in line for k in keep)][-40:],
        "pairs": [[r["problem_id"], r["sample"]] for r in rows],
        "metrics": json.loads((out / "metrics.json").read_text()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/multi_gpu_eval.json")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--method", default="naive_concat")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["model"].update(device=args.device, dtype=args.dtype)
    override(params, args.set)
    runs = []
    with tempfile.TemporaryDirectory(prefix="multi_gpu_eval-") as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "orchestry", work / "orchestry")
        shutil.copytree(REPO / "data", work / "data")
        params["model"]["cache_dir"] = str(REPO / params["model"]["cache_dir"])
        for processes in (1, args.world, 1, args.world):  # the first run also converts the model
            params["evaluate"]["processes"] = processes
            parse_params(params, "params.yaml + multi_gpu_eval overrides")
            runs.append(run_stage(work, params, args.method))
            print(json.dumps({k: runs[-1][k] for k in ("processes", "seconds")}), flush=True)
    one, many = runs[2:]  # the second pair: the converted model is in the cache for both
    if any(r["pairs"] != one["pairs"] for r in runs):
        raise SystemExit("the runs cover different (problem, sample) pairs")
    keys = ("pass@1", "pass@1_ci95", "return_mean", "return_ci95", "problems", "samples")
    report = {
        "method": args.method,
        "world_sizes": [1, args.world],
        "seconds": {str(r["processes"]): r["seconds"] for r in (one, many)},
        "first_pair_seconds": {str(r["processes"]): r["seconds"] for r in runs[:2]},
        "speedup": one["seconds"] / many["seconds"],
        "same_pairs_in_order": True,
        "metrics": {
            str(r["processes"]): {k: r["metrics"].get(k) for k in keys} for r in (one, many)
        },
        "logs": {str(r["processes"]): r["log"] for r in (one, many)},
        "settings": {"device": args.device, "dtype": args.dtype, "set": args.set},
        "machine": {"platform": platform.platform(), "cpus": len(os.sched_getaffinity(0))},
    }
    if args.device == "cuda":
        import torch

        report["devices"] = [torch.cuda.get_device_name(i) for i in range(args.world)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)
    print(json.dumps({k: report[k] for k in ("seconds", "speedup", "metrics")}))


if __name__ == "__main__":
    main()
