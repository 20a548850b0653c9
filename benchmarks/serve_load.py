"""Load test of `python -m orchestry serve`: many concurrent chat requests against the real server
process on the embedded model, batched and then one at a time, then a mixed soak, in one run.

Each mode starts its own server (`--max-batch B`, then `--max-batch 1`), warms it with one request,
then `--concurrency` client threads send `--requests` chat requests (agents `aux` and `main` in
turn, short distinct prompts, `max_tokens` small). A request is answered (200), refused (429, the
queue full), failed (another HTTP error) or lost (no HTTP answer at all: must be 0). Writes the
batched run's numbers at the top level of `--out`, the one-at-a-time run under `one_at_a_time`, their
throughput ratio; its manifest (commit, dirty, code hash, command, hardware, date, wall time) beside it.

Then the soak (`serve_soak.py`; `--soak-requests 0`: none) starts a third server, with an API key
and short read timeouts, and sends `--soak-requests` clients from `--soak-clients` threads, good
(seeded) and bad or hanging up mixed; its numbers and checks go under `soak`, and a failed check
makes the run exit 1 (after writing the record). `--device cuda` serves on the GPU (the params'
`model.device`, overridden in a copy).

    python benchmarks/serve_load.py --out results/bench/serve.json
    python benchmarks/serve_load.py --device cuda --out results/bench/serve_cuda.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from serve_soak import Server, SoakSettings, soak

ROOT = Path(__file__).resolve().parents[1]
# this checkout's package, not an installed one (a wheelhouse's): the manifest names what ran
sys.path.insert(0, str(ROOT))

from orchestry import io  # noqa: E402
from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402
from orchestry.params import load_params  # noqa: E402
from orchestry.serve.launch import running_server, server_process  # noqa: E402
from orchestry.stages.from_params import make_policy  # noqa: E402

log = logging.getLogger("serve_load")
SOAK_MAX_BODY = 1 << 20  # the soak server's --max-body-bytes (the default)


def chat(url: str, i: int, max_tokens: int, timeout_s: float) -> tuple[str, float]:
    """One request: its outcome (answered, refused, failed:<code>, lost) and seconds."""
    body = {
        "model": ("aux", "main")[i % 2],
        "messages": [{"role": "user", "content": f"Write a Python one-liner that adds {i} to x."}],
        "max_tokens": max_tokens,
    }
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            ok = bool(json.load(r)["choices"][0]["message"]["content"] is not None)
            outcome = "answered" if ok else "failed:empty"
    except urllib.error.HTTPError as err:
        outcome = "refused" if err.code == 429 else f"failed:{err.code}"
    except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
        log.warning("request %d got no answer: %r", i, err)
        outcome = "lost"
    return outcome, time.perf_counter() - start


def load(url: str, n: int, concurrency: int, max_tokens: int, timeout_s: float) -> dict[str, Any]:
    """Send n requests from `concurrency` threads; the counts, throughput and latencies."""
    chat(url, -1, max_tokens, timeout_s)  # warm-up, not counted
    start = time.perf_counter()
    done = 0

    def one(i: int) -> tuple[str, float]:
        nonlocal done
        result = chat(url, i, max_tokens, timeout_s)
        done += 1
        if done % 25 == 0:
            log.info("%d/%d requests done, %.0f s", done, n, time.perf_counter() - start)
        return result

    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(n)))
    wall = time.perf_counter() - start
    outcomes = [o for o, _ in results]
    answered = sorted(s for o, s in results if o == "answered")
    failed = [o for o in outcomes if o.startswith("failed")]
    return {
        "requests": n,
        "answered": len(answered),
        "refused": outcomes.count("refused"),
        "failed": len(failed),
        "lost": outcomes.count("lost"),
        "wall_s": round(wall, 2),
        "throughput_rps": round(len(answered) / wall, 3),
        "p50_s": round(statistics.median(answered), 3) if answered else None,
        "p95_s": round(answered[int(0.95 * (len(answered) - 1))], 3) if answered else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml", help="the model and sampling defaults")
    ap.add_argument("--adapters", default=None, help="adapters folder (default: fresh ones)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32, help="client threads")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=32, help="the batched server's --max-batch")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="one request's client timeout")
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="OMP_NUM_THREADS of the servers (default 1: on a shared 2-core machine torch's own "
        "default oversubscribes the cores and one 8-token request takes ~8x longer)",
    )
    ap.add_argument(
        "--device",
        choices=["cpu", "cuda", "auto"],
        default=None,
        help="the servers' model.device (default: the params')",
    )
    ap.add_argument("--soak-requests", type=int, default=1000, help="soak clients (0: no soak)")
    ap.add_argument("--soak-clients", type=int, default=32, help="soak client threads")
    ap.add_argument("--soak-bad-share", type=float, default=0.25, help="bad or hanging up")
    ap.add_argument("--soak-max-tokens", type=int, default=4, help="a good soak request's")
    ap.add_argument("--soak-check", type=int, default=64, help="good answers asked again alone")
    ap.add_argument(
        "--soak-read-timeout-s",
        type=float,
        default=3.0,
        help="the soak server's --header-timeout-s and --body-timeout-s: how long a stalled "
        "client waits for its 408",
    )
    ap.add_argument("--out", default="results/bench/serve.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    started = time.time()
    os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)  # the servers inherit it
    with tempfile.TemporaryDirectory() as tmp:
        params = Path(args.params).resolve()
        if args.device:  # a copy with model.device changed; relative paths in it read from ROOT
            chosen = yaml.safe_load(params.read_text())
            chosen["model"]["device"] = args.device
            params = Path(tmp) / "params.yaml"
            params.write_text(yaml.safe_dump(chosen, sort_keys=False))
        adapters = Path(args.adapters) if args.adapters else Path(tmp) / "adapters"
        if not args.adapters:  # the trained team's shape; untrained weights serve alike
            make_policy(load_params(params)).save_adapters(adapters)
        runs = {}
        for mode, batch in (("batched", args.max_batch), ("one_at_a_time", 1)):
            server_log = Path(tmp) / f"{mode}.log"
            flags = ["--max-batch", str(batch), "--max-queue", str(args.requests + 8)]
            with server_process(params, adapters, flags, server_log, cwd=ROOT) as url:
                log.info("%s (max batch %d): %d requests", mode, batch, args.requests)
                runs[mode] = load(
                    url, args.requests, args.concurrency, args.max_tokens, args.timeout_s
                )
            batches = server_log.read_text().count(" request(s) for ")
            runs[mode]["generate_calls"] = batches - 1  # less the warm-up's
            log.info("%s: %s", mode, runs[mode])
        soaked = run_soak(args, params, adapters, Path(tmp)) if args.soak_requests else None
    batched, single = runs["batched"], runs["one_at_a_time"]
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    result = {
        **batched,
        "one_at_a_time": single,
        "batched_over_one_at_a_time": round(
            batched["throughput_rps"] / single["throughput_rps"], 2
        ),
        "settings": settings,
        **({"soak": soaked} if soaked else {}),
    }
    io.write_json(Path(args.out), result)
    write_bench_manifest(Path(args.out), __file__, sys.argv, started)
    log.info("wrote %s: batched/one-at-a-time = %s", args.out, result["batched_over_one_at_a_time"])
    if soaked and soaked["failures"]:
        log.error("the soak failed: %s", "; ".join(soaked["failures"]))
        sys.exit(1)


def run_soak(args: argparse.Namespace, params: Path, adapters: Path, tmp: Path) -> dict[str, Any]:
    """The soak against a server of its own, with an API key and short read timeouts."""
    key = secrets.token_hex(16)
    timeout = str(args.soak_read_timeout_s)
    flags = ["--max-batch", str(args.max_batch), "--max-queue", str(args.soak_requests + 64)]
    flags += ["--header-timeout-s", timeout, "--body-timeout-s", timeout]
    flags += ["--max-body-bytes", str(SOAK_MAX_BODY)]
    settings = SoakSettings(
        requests=args.soak_requests,
        clients=args.soak_clients,
        bad_share=args.soak_bad_share,
        max_tokens=args.soak_max_tokens,
        check=args.soak_check,
        timeout_s=args.timeout_s,
    )
    env = {"ORCHESTRY_API_KEY": key}
    with running_server(params, adapters, flags, tmp / "soak.log", cwd=ROOT, env=env) as server:
        record = soak(Server(server.url, server.pid, key, SOAK_MAX_BODY), settings)
    log.info("soak: %s", record)
    return {**record, "server_flags": flags}


if __name__ == "__main__":
    main()
