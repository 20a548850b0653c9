"""Timings apart from results: what differs between two runs of the same code and params.

Seconds, tokens/s and step times are measured, not computed: two runs of unchanged code give other
values. The stages' outputs (tracked by git, or by DVC through dvc.lock) hold none of them, so a second
`dvc repro` leaves git and dvc.lock as they were; the timings go to paths.timing(name) under
logs/timings/ (gitignored), with the speed figure beside them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from orchestry import paths

log = logging.getLogger("orchestry.stages.timings")
TIMING_KEYS = ("tokens_per_s", "step_seconds")  # measured per training step


def untimed(history: list[dict[str, float]]) -> list[dict[str, float]]:
    """A training history without its timings: what the stage's outputs keep."""
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in history]


def timing_record(history: list[dict[str, float]]) -> dict[str, Any]:
    """A training run's timings: each step's seconds and generated tokens/s, and their means."""
    out: dict[str, Any] = {k: [row[k] for row in history if k in row] for k in TIMING_KEYS}
    for key in TIMING_KEYS:
        out[f"{key}_mean"] = float(np.mean(out[key])) if out[key] else None
    return out


def plot_speed(methods: Sequence[str], labels: Sequence[str]) -> None:
    """Generation speed per method, from the methods' timing records, drawn beside them
    (logs/timings/speed.png and .pdf); not drawn where a method has no record. Called by the figures
    stage, which has set matplotlib's backend (train imports this module without matplotlib)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    records = {m: paths.timing(m) for m in methods}
    if not all(path.is_file() for path in records.values()):
        log.info("no timing record for every method: the speed figure is not drawn")
        return
    speeds = [json.loads(records[m].read_text()) for m in methods]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = sns.color_palette("colorblind", len(speeds))
    for ax, (col, label) in zip(
        axes,
        [
            ("tokens_per_s", "Generated tokens / s"),
            ("response_seconds_mean", "Response time per sample (s)"),
        ],
        strict=True,
    ):
        ax.bar(list(labels), [s[col] for s in speeds], color=colors, edgecolor="black")
        ax.set_ylabel(label)
        ax.set_xlabel("Method")
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle("Generation speed (same machine, batched generation)", y=1.02)
    fig.tight_layout()
    paths.TIMINGS.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(paths.TIMINGS / f"speed.{ext}")
    plt.close(fig)
