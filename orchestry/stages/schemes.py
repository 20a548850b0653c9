"""Stage `schemes`: a census of the cooperation schemes in every generated (aux, main) pair.

Reads the training rollouts and the generations of the baselines and the trained team, classifies each
pair with `schemes.classify_pair` and writes one CSV row per pair plus a summary: the label distribution
per method and per training window (the evolution of schemes over training). Rows of a text
environment (story, writing) have no code: they are left out, and the census is then empty.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np

from orchestry import io, paths
from orchestry.analysis.schemes import LABELS, classify_pair
from orchestry.params import BASELINE_NAMES, Params

ROLLOUTS = paths.ROLLOUTS
GENERATIONS = [paths.generations(n) for n in (*BASELINE_NAMES, "magrpo") if n != "single"]


def _pair(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """(aux code, main code, aux name, main name) of a row; the first helper stands for the helpers."""
    code = row["code"]
    agents = list(code)
    return code[agents[0]], code[agents[-1]], row["helper_names"][0], row["main_name"]


def pairs(paths: list[Path], rollouts: Path) -> Iterator[dict[str, Any]]:
    """Every analysable pair, tagged with its source run, method, step and turn."""
    for row in io.read_jsonl(rollouts):
        if "helper_names" not in row:  # a text environment's row: no code to classify
            continue
        yield {
            "source": "train",
            "method": "magrpo (training)",
            "step": row["step"],
            "turn": row["turn"],
            **_fields(row),
        }
    for path in paths:
        for row in io.read_jsonl(path):
            if "helper_names" not in row:
                continue
            yield {
                "source": path.parent.name,
                "method": row["method"],
                "step": "",
                "turn": 1,
                **_fields(row),
            }


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    aux, main, aux_name, main_name = _pair(row)
    res = classify_pair(aux, main, aux_name=aux_name, main_name=main_name)
    return {
        "problem_id": row["problem_id"],
        "primary": res.primary,
        "flags": ";".join(sorted(res.flags)),
        **{label: int(label in res.flags) for label in LABELS},
    }


def window_edges(max_step: int, windows: int) -> list[tuple[int, int]]:
    """Split steps 0..max_step into `windows` contiguous, nearly equal ranges (inclusive)."""
    bounds = np.linspace(0, max_step + 1, min(windows, max_step + 1) + 1).round().astype(int)
    return [
        (int(lo), int(hi) - 1) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True) if hi > lo
    ]


def summarize(rows: list[dict[str, Any]], windows: int) -> dict[str, Any]:
    def counts(subset: list[dict[str, Any]]) -> dict[str, Any]:
        primary = {label: sum(r["primary"] == label for r in subset) for label in LABELS}
        flags = {label: sum(r[label] for r in subset) for label in LABELS}
        return {"pairs": len(subset), "primary": primary, "flags": flags}

    methods = sorted({r["method"] for r in rows})
    train = [r for r in rows if r["source"] == "train"]
    evolution = []
    if train:
        for lo, hi in window_edges(max(r["step"] for r in train), windows):
            evolution.append(
                {"steps": [lo, hi], **counts([r for r in train if lo <= r["step"] <= hi])}
            )
    return {
        "labels": list(LABELS),
        "per_method": {m: counts([r for r in rows if r["method"] == m]) for m in methods},
        "training_windows": evolution,
    }


def run(params: Params) -> None:
    missing = [str(p) for p in [ROLLOUTS, *GENERATIONS] if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"schemes needs {', '.join(missing)}; run train, baseline and evaluate first"
        )
    rows = list(pairs(GENERATIONS, ROLLOUTS))
    buf = StringIO()
    fields = ["source", "method", "step", "turn", "problem_id", "primary", "flags", *LABELS]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    io.write_text(paths.SCHEMES / "schemes.csv", buf.getvalue())
    io.write_json(paths.SCHEMES / "summary.json", summarize(rows, params.schemes.windows))
