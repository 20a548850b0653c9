"""The orchestrate stage's numbers: each method's return r - λ·C on the test split, and the verdict.

A row is one test episode: `problem_id`, `reward` (the environment's score of the final joint
action), `cost` (tokens generated, tester calls at the tool cost) and, for the code task, `correct`.
Intervals are 95% bootstrap intervals over problems (each problem's samples averaged first), as in
`metrics.py`; a difference between two methods resamples the problems they share, paired.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestry.eval.metrics import bootstrap_ci


def per_problem(
    rows: Sequence[Mapping[str, Any]], key: str, cost_weight: float
) -> dict[str, float]:
    """Problem id -> the mean of `key` over its rows (`return` = reward - λ·cost)."""
    values: dict[str, list[float]] = {}
    for r in rows:
        v = r["reward"] - cost_weight * r["cost"] if key == "return" else float(r[key])
        values.setdefault(r["problem_id"], []).append(v)
    return {p: float(np.mean(v)) for p, v in values.items()}


def summarize(
    rows: Sequence[Mapping[str, Any]], cost_weight: float, resamples: int, seed: int
) -> dict[str, Any]:
    """Mean and interval of return, reward, cost and calls (and pass rate when rows have it)."""
    if not rows:
        raise ValueError("no episodes to summarize")
    keys = ["return", "reward", "cost", "calls"] + (["correct"] if "correct" in rows[0] else [])
    out: dict[str, Any] = {"episodes": len(rows), "cost_weight": cost_weight}
    for key in keys:
        values = list(per_problem(rows, key, cost_weight).values())
        out[f"{key}_mean"] = float(np.mean(values))
        out[f"{key}_ci95"] = list(bootstrap_ci(values, resamples, seed))
    return out


def paired_difference(
    a: Sequence[Mapping[str, Any]],
    b: Sequence[Mapping[str, Any]],
    key: str,
    cost_weight: float,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Mean of a - b over the problems both have, with its interval."""
    pa, pb = per_problem(a, key, cost_weight), per_problem(b, key, cost_weight)
    shared = sorted(set(pa) & set(pb))
    if not shared:
        raise ValueError(f"no problem in common to compare {key} on")
    diffs = [pa[p] - pb[p] for p in shared]
    return {"mean": float(np.mean(diffs)), "ci95": list(bootstrap_ci(diffs, resamples, seed))}


def verdict(
    learned: Sequence[Mapping[str, Any]],
    fixed: Mapping[str, Sequence[Mapping[str, Any]]],
    cost_weight: float,
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """The learned orchestrator against the best fixed order at this λ (by mean return).

    `met`: the return difference's interval lies above 0 (higher return), or the cost
    difference's interval lies below 0 while the mean return is not lower (cheaper, as good).
    """
    means = {n: summarize(r, cost_weight, resamples, seed)["return_mean"] for n, r in fixed.items()}
    best = max(means, key=lambda n: means[n])
    ret = paired_difference(learned, fixed[best], "return", cost_weight, resamples, seed)
    cost = paired_difference(learned, fixed[best], "cost", cost_weight, resamples, seed)
    higher = ret["ci95"][0] > 0
    cheaper = cost["ci95"][1] < 0 and ret["mean"] >= 0
    return {
        "best_fixed": best,
        "return_diff": ret,
        "cost_diff": cost,
        "higher_return": higher,
        "cheaper_as_good": cheaper,
        "met": bool(higher or cheaper),
    }


def results_table(metrics: Mapping[str, Any]) -> str:
    """results.md of the stage: one block per λ, the learned orchestrator and the fixed orders."""
    lines = [
        "# Learned orchestrator vs fixed orders (test split)",
        "",
        "Return = reward - λ·cost; cost in tokens (a tester call at the tool cost). 95% bootstrap",
        "intervals over problems; the difference is paired by problem against the best fixed order.",
        "",
    ]
    for block in metrics["by_cost_weight"]:
        lam = block["cost_weight"]
        lines += [
            f"## λ = {lam:g}",
            "",
            "| Method | Return | Reward | Cost (tokens) | Calls |",
            "|---|---|---|---|---|",
        ]
        for name, s in [("learned", block["learned"]), *block["fixed"].items()]:
            lines.append(
                f"| {name} | {_ci(s, 'return')} | {_ci(s, 'reward')} | {_ci(s, 'cost', 0)} "
                f"| {s['calls_mean']:.2f} |"
            )
        v = block["verdict"]
        lines += [
            "",
            f"Against {v['best_fixed']}: return {_diff(v['return_diff'])}, cost "
            f"{_diff(v['cost_diff'], 0)}; target {'met' if v['met'] else 'not met'}.",
            "",
        ]
    return "\n".join(lines)


def _ci(s: Mapping[str, Any], key: str, digits: int = 3) -> str:
    lo, hi = s[f"{key}_ci95"]
    return f"{s[f'{key}_mean']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _diff(d: Mapping[str, Any], digits: int = 3) -> str:
    lo, hi = d["ci95"]
    return f"{d['mean']:+.{digits}f} [{lo:+.{digits}f}, {hi:+.{digits}f}]"
