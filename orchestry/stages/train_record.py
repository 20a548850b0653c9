"""The training run's record: per-step history (CSV and dvclive files) and its summary metrics.

Written by `train` and `train_single` alike; timings are taken out before (stages/timings.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from orchestry import io
from orchestry.algos.failure import TrainingFailed
from orchestry.eval.metrics import quarter_means


def write_dvclive(history: list[dict[str, float]], live_dir: Path) -> None:
    """Per-step metrics as dvclive files (plots/metrics/*.tsv and metrics.json) for `dvc plots show`."""
    from dvclive import Live

    with Live(dir=str(live_dir), save_dvc_exp=False, dvcyaml=None) as live:
        for row in history:
            for key, value in row.items():
                if key != "step":
                    live.log_metric(key, value)
            live.next_step()


def check_dvclive() -> None:
    """Fail before training, not after it, where dvclive cannot write the training record (e.g. a
    machine with dvclive but not the modules its `Live` imports as it starts)."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            write_dvclive([], Path(tmp) / "live")
    except ImportError as err:
        raise TrainingFailed(
            f"dvclive cannot write the training record ({err}); install dvclive with its "
            "dependencies (pip install dvclive) and run again"
        ) from err


def write_history_csv(history: list[dict[str, float]], path: Path) -> None:
    """One row per step, one column per metric (the figures' and `dvc plots`' input)."""
    keys = list(dict.fromkeys(k for row in history for k in row))
    lines = [",".join(keys)]
    lines += [",".join(f"{row.get(k, '')}" for k in keys) for row in history]
    io.write_text(path, "\n".join(lines) + "\n")


def summarize(history: list[dict[str, float]]) -> dict[str, Any]:
    """Final metrics: first-quarter vs last-quarter mean return and the last step's levels (the
    code task's pass and coop rates too; other environments log neither)."""
    rets = [h["return_mean"] for h in history]
    first, last = quarter_means(rets)
    out = {
        "steps": len(history),
        "return_first_quarter": first,
        "return_last_quarter": last,
        "return_mean": float(np.mean(rets)),
    }
    if "pass_rate" in history[0]:
        coop = quarter_means([h["coop_rate"] for h in history])
        out["pass_rate_last_quarter"] = quarter_means([h["pass_rate"] for h in history])[1]
        out["coop_rate_first_quarter"], out["coop_rate_last_quarter"] = coop
    return out
