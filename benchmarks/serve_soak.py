"""The soak of `serve_load.py --soak-requests N`: good and hostile clients at once against a real
server, then what must hold. A module, not a script (tests/serve/test_soak.py runs a small one).

Each of `requests` clients (from `clients` threads, in a seeded random order) is one of:

- good: a chat request to `aux`, `main` or `team` with its own `seed`, temperature 1 and a small
  `max_tokens`; it must be answered (200). Lost: no HTTP answer at all;
- bad, each answered with a 4xx in OpenAI's error shape: malformed JSON, a field of the wrong type,
  an unknown model, a body declared over --max-body-bytes, a wrong API key (when the server has
  one), a Host the server does not answer, a body that stalls (408), a head that stalls (408);
- hanging up: a client that closes its connection mid-body, or after its whole request but before
  the answer; nobody is there to get an answer, and the server must go on serving.

Then: a sample of the good requests is sent again one at a time, and each answer must equal the
one the soak gave (a seeded answer depends on its seed alone, not on what ran beside it); the
server's resident memory (VmRSS), read after a warm-up round and after the soak, must not grow
by more than 10%.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import socket
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("serve_soak")

GOOD_MODELS = ("aux", "main", "aux", "main", "team")  # the team's answer costs two agents
BAD_STATUS = {  # a bad client's kind -> the status it must get
    "malformed_json": 400,
    "wrong_type": 400,
    "unknown_model": 404,
    "oversize_body": 413,
    "bad_auth": 401,
    "bad_host": 400,
    "stalled_body": 408,
    "stalled_head": 408,
}
HANG_UPS = ("hang_up_mid_body", "hang_up_waiting")
RSS_GROWTH_LIMIT = 0.10


@dataclass(frozen=True)
class SoakSettings:
    """One soak's size and mix."""

    requests: int = 1000
    clients: int = 32
    """Client threads sending at once."""
    bad_share: float = 0.25
    """Share of the requests that are bad clients or hang up."""
    max_tokens: int = 4
    check: int = 64
    """Good answers asked again alone afterwards (all of them if fewer)."""
    warmup: int = 64
    """Requests of the same mix before the memory is first read (not counted)."""
    timeout_s: float = 600.0
    """One client's wait for its answer."""
    seed: int = 0


@dataclass(frozen=True)
class Server:
    """What the soak talks to."""

    url: str
    pid: int
    api_key: str | None
    max_body_bytes: int


def schedule(
    n: int, kinds: list[str], settings: SoakSettings, start: int = 0
) -> list[tuple[str, int]]:
    """(kind, index) of n clients: `bad_share` of them bad or hanging up (`kinds` in turn), the
    rest good, in a seeded random order."""
    n_bad = round(n * settings.bad_share)
    picked = [kinds[i % len(kinds)] for i in range(n_bad)] + ["good"] * (n - n_bad)
    random.Random(settings.seed + start).shuffle(picked)
    return [(kind, start + i) for i, kind in enumerate(picked)]


def good_body(i: int, max_tokens: int) -> dict[str, Any]:
    """Client i's good request: its own seed and prompt."""
    model = GOOD_MODELS[i % len(GOOD_MODELS)]
    if model == "team":
        text = f'def add_{i}(x):\n    """Return x plus {i}."""\n'
    else:
        text = f"Write a Python one-liner that adds {i} to x."
    return {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": 1000 + i,
    }


def http_bytes(
    server: Server,
    body: bytes,
    *,
    key: str | None = None,
    host: str | None = None,
    length: int | None = None,
) -> bytes:
    """A raw HTTP/1.1 chat request (`length`: the Content-Length it declares)."""
    parts = urlsplit(server.url)
    key = server.api_key if key is None else key
    head = [
        "POST /v1/chat/completions HTTP/1.1",
        f"Host: {host or parts.netloc}",
        "Content-Type: application/json",
        f"Content-Length: {len(body) if length is None else length}",
        "Connection: close",
        *([f"Authorization: Bearer {key}"] if key else []),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def exchange(
    server: Server, data: bytes, timeout_s: float, hang_up: bool = False
) -> tuple[int | None, bytes]:
    """Send `data` on a new connection; the answer's status and body, (None, b"") if no answer
    came; with `hang_up`, close the connection at once instead ((0, b""))."""
    parts = urlsplit(server.url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as s:
            s.sendall(data)
            if hang_up:
                return 0, b""
            reply = http.client.HTTPResponse(s)
            reply.begin()
            return reply.status, reply.read()
    except (OSError, http.client.HTTPException) as err:
        log.warning("no answer: %r", err)
        return None, b""


def one_client(server: Server, kind: str, i: int, settings: SoakSettings) -> dict[str, Any]:
    """Run client i of `kind`; what it sent and got."""
    good = json.dumps(good_body(i, settings.max_tokens)).encode()
    timeout = settings.timeout_s
    if kind == "good":
        start = time.perf_counter()
        status, body = exchange(server, http_bytes(server, good), timeout)
        seconds = time.perf_counter() - start
        return {"kind": kind, "i": i, "status": status, "s": seconds, "content": _content(body)}
    sent = {
        "malformed_json": lambda: http_bytes(server, good[: len(good) // 2]),
        "wrong_type": lambda: http_bytes(server, _wrong_type(i, settings.max_tokens)),
        "unknown_model": lambda: http_bytes(server, good.replace(b'"model": "', b'"model": "gpt-')),
        "oversize_body": lambda: http_bytes(server, b"", length=server.max_body_bytes + 1),
        "bad_auth": lambda: http_bytes(server, good, key="not-the-key"),
        "bad_host": lambda: http_bytes(server, good, host="rebound.example"),
        "stalled_body": lambda: http_bytes(server, good[:20], length=len(good)),
        "stalled_head": lambda: http_bytes(server, b"")[:40],
        "hang_up_mid_body": lambda: http_bytes(server, good[:20], length=len(good)),
        "hang_up_waiting": lambda: http_bytes(server, good),
    }[kind]()
    status, _ = exchange(server, sent, timeout, hang_up=kind in HANG_UPS)
    return {"kind": kind, "i": i, "status": status}


def _wrong_type(i: int, max_tokens: int) -> bytes:
    body = good_body(i, max_tokens)
    field, value = [("max_tokens", "4"), ("messages", "hi"), ("temperature", "hot")][i % 3]
    return json.dumps({**body, field: value}).encode()


def _content(body: bytes) -> str | None:
    try:
        return json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def rss_mb(pid: int) -> float:
    """The process's resident memory (VmRSS), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def run_clients(
    server: Server, plan: list[tuple[str, int]], settings: SoakSettings
) -> list[dict[str, Any]]:
    done = 0
    start = time.perf_counter()

    def one(client: tuple[str, int]) -> dict[str, Any]:
        nonlocal done
        result = one_client(server, *client, settings)
        done += 1
        if done % 100 == 0:
            log.info("soak: %d/%d clients, %.0f s", done, len(plan), time.perf_counter() - start)
        return result

    with ThreadPoolExecutor(settings.clients) as pool:
        return list(pool.map(one, plan))


def soak(server: Server, settings: SoakSettings) -> dict[str, Any]:
    """Warm up, read the memory, soak, read it again, ask a sample again alone; the record."""
    wanted = {k: v for k, v in BAD_STATUS.items() if server.api_key or k != "bad_auth"}
    kinds = [*wanted, *HANG_UPS]
    run_clients(server, schedule(settings.warmup, kinds, settings, 10**6), settings)
    rss_before = rss_mb(server.pid)
    log.info("soak: warm, VmRSS %.0f MiB; %d clients", rss_before, settings.requests)
    start = time.perf_counter()
    results = run_clients(server, schedule(settings.requests, kinds, settings), settings)
    wall = time.perf_counter() - start
    time.sleep(1.0)  # the hung-up requests' answers are dropped
    rss_after = rss_mb(server.pid)

    good = [r for r in results if r["kind"] == "good"]
    answered = [r for r in good if r["status"] == 200 and r["content"] is not None]
    bad = [r for r in results if r["kind"] in wanted]
    hung = [r for r in results if r["kind"] in HANG_UPS]
    got_4xx = [r for r in bad if r["status"] is not None and 400 <= r["status"] < 500]
    latencies = sorted(r["s"] for r in answered)
    by_kind = {
        kind: {
            "sent": sum(r["kind"] == kind for r in bad),
            "wanted": status,
            "got": dict(
                sorted(Counter(str(r["status"]) for r in bad if r["kind"] == kind).items())
            ),
        }
        for kind, status in wanted.items()
    }
    sample = random.Random(settings.seed).sample(answered, min(settings.check, len(answered)))
    log.info("soak: %.0f s; asking %d good requests again, one at a time", wall, len(sample))
    differ = [
        r["i"]
        for r in sorted(sample, key=lambda r: r["i"])
        if one_client(server, "good", r["i"], settings)["content"] != r["content"]
    ]
    alive = (
        exchange(server, http_bytes(server, json.dumps(good_body(0, 1)).encode()), 120)[0] == 200
    )
    record = {
        "requests": len(results),
        "clients": settings.clients,
        "bad_or_hanging_up_share": round((len(bad) + len(hung)) / len(results), 3),
        "wall_s": round(wall, 1),
        "good": {
            "sent": len(good),
            "answered": len(answered),
            "lost": sum(r["status"] is None for r in good),
            "failed": len(good) - len(answered) - sum(r["status"] is None for r in good),
            "p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 3) if latencies else None,
        },
        "bad": {
            "sent": len(bad),
            "got_4xx": len(got_4xx),
            "other": len(bad) - len(got_4xx),
            "wanted_status": sum(r["status"] == wanted[r["kind"]] for r in bad),
            "by_kind": by_kind,
        },
        "hung_up": {"sent": len(hung), "server_answers_after": alive},
        "same_answer_alone": {"checked": len(sample), "identical": len(sample) - len(differ)},
        "rss_mb": {
            "before": round(rss_before, 1),
            "after": round(rss_after, 1),
            "growth": round(rss_after / rss_before - 1, 4),
        },
    }
    record["failures"] = failures(record)
    return record


def failures(record: dict[str, Any]) -> list[str]:
    """What the soak must show and did not (empty: it passed)."""
    out = []
    good, bad = record["good"], record["bad"]
    if good["lost"] or good["failed"]:
        out.append(f"good requests lost {good['lost']}, failed {good['failed']}")
    if bad["other"]:
        out.append(f"{bad['other']} bad requests got no 4xx: {bad['by_kind']}")
    same = record["same_answer_alone"]
    if same["identical"] != same["checked"]:
        out.append(f"{same['checked'] - same['identical']} seeded answers differ when sent alone")
    if not record["hung_up"]["server_answers_after"]:
        out.append("the server did not answer after the soak")
    if record["rss_mb"]["growth"] > RSS_GROWTH_LIMIT:
        out.append(f"VmRSS grew {record['rss_mb']['growth']:.1%} (over {RSS_GROWTH_LIMIT:.0%})")
    return out
