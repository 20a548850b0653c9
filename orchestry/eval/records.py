"""Row records of an evaluated method: one row per sample in generations.jsonl, metrics beside them.

Both files of a method are written from the same rows, so a metrics file always describes the
generations next to it (the `schemes` and `figures` stages read them back).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from orchestry import io, paths
from orchestry.eval.metrics import compute_metrics, speed

log = logging.getLogger("orchestry.eval.records")


def write_method(
    method: str, rows: list[dict[str, Any]], ks: Sequence[int], resamples: int, seed: int
) -> dict[str, Any]:
    """Metrics of `rows` (with bootstrap CIs), and both files of `method`, written atomically; the
    rows' seconds and the speed go to the method's timing record (logs/timings/, out of git), so the
    same code and params write the same files."""
    timing = speed(rows)
    rows = [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
    metrics = compute_metrics(rows, list(ks), resamples, seed)
    io.write_jsonl(paths.generations(method), rows)
    io.write_json(paths.metrics(method), metrics)
    io.write_json(paths.timing(method), timing)
    log.info(
        "%s: pass@1 %s, mean return %.3f, %.1f tokens/s -> %s",
        method,
        f"{metrics['pass@1']:.3f}" if "pass@1" in metrics else "n/a",
        metrics["return_mean"],
        timing["tokens_per_s"],
        paths.method_dir(method),
    )
    return metrics
