"""Evaluation metrics, computed only from generation rows so every number can be re-derived.

pass@k uses the unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k) for a problem with n
samples of which c pass every test; 95% confidence intervals come from a bootstrap over problems.

Besides the team's results, each role is measured on its own (`RATES`, from the row records that
envs/code/role_checks.py fills): does the helper define aux, is aux right on its derived unit tests,
does main call aux (and use its value), would main be right with the reference aux. A rate is the
mean over the rows that have a value (n/a rows, e.g. HumanEval has no reference aux, are left out; a rate
with no value at all is null); its CI resamples the per-problem means.

The robust test pass rate (`robust_test_pass_rate`, envs/code/trivial_tests.py) counts only the
tests no constant answer passes; a problem whose tests are all trivial has no value, and
`all_trivial_problems` counts them (rows from before the rate existed have neither).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from math import comb
from typing import Any

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with n samples, c of them correct."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def quarter_means(values: Sequence[float]) -> tuple[float, float]:
    """Mean of the first and of the last quarter of a series (at least one value each): the
    training curve "rises" when the second exceeds the first."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("quarter means of an empty series")
    q = max(1, arr.size // 4)
    return float(arr[:q].mean()), float(arr[-q:].mean())


def bootstrap_ci(values: Sequence[float], resamples: int, seed: int) -> tuple[float, float]:
    """95% percentile interval of the mean, resampling the per-problem values."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError("bootstrap over an empty set of problems")
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(resamples, arr.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


RATES: dict[str, Callable[[dict[str, Any]], float | None]] = {
    # the paper's coop metric: main calls aux and uses its value, in a program passing >= 1 test
    "coop_rate": lambda r: float(r["reward"]["main_calls_aux"] and r["reward"]["pass_rate"] > 0),
    "test_pass_rate": lambda r: r["reward"]["pass_rate"],
    # the asserts a constant answer cannot pass (None: every test is trivial, or an older row)
    "robust_test_pass_rate": lambda r: _float(r.get("robust_pass_rate")),
    "aux_defined_rate": lambda r: _float(r.get("aux_defined")),
    "aux_correct_rate": lambda r: _float(r.get("aux_correct")),
    "main_calls_aux_rate": lambda r: float(r["reward"]["main_calls_aux"]),
    "main_correct_ref_aux_rate": lambda r: _float(r.get("main_correct_ref_aux")),
}


def problem_rates(
    by_problem: dict[str, list[dict[str, Any]]], value: Callable[[dict[str, Any]], float | None]
) -> list[float]:
    """Per problem, the mean of `value` over its rows that have one (problems with none: left out)."""
    out = []
    for rows in by_problem.values():
        vals = [v for v in map(value, rows) if v is not None]
        if vals:
            out.append(float(np.mean(vals)))
    return out


def compute_metrics(
    rows: Sequence[dict[str, Any]], ks: Sequence[int], resamples: int, seed: int
) -> dict[str, Any]:
    """Metrics of one method from its generations.jsonl rows (one row per sample)."""
    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_problem[row["problem_id"]].append(row)
    if not by_problem:
        raise ValueError("no generations to evaluate")
    if "correct" not in rows[0]:  # a text environment: no tests, the reward's parts instead
        return text_metrics(rows, by_problem, resamples, seed)
    n_min = min(len(v) for v in by_problem.values())
    per_problem_pass1 = []
    per_problem_return = []
    out: dict[str, Any] = {
        "problems": len(by_problem),
        "samples": len(rows),
        "n_per_problem": n_min,
    }
    for k in ks:
        if k > n_min:
            continue
        vals = [pass_at_k(len(v), sum(r["correct"] for r in v), k) for v in by_problem.values()]
        out[f"pass@{k}"] = float(np.mean(vals))
        if k == 1:
            per_problem_pass1 = vals
    for v in by_problem.values():
        per_problem_return.append(float(np.mean([r["reward"]["total"] for r in v])))
    out["return_mean"] = float(np.mean(per_problem_return))
    out["pass@1_ci95"] = list(bootstrap_ci(per_problem_pass1, resamples, seed))
    out["return_ci95"] = list(bootstrap_ci(per_problem_return, resamples, seed))
    out["structure_rate"] = float(
        np.mean([r["reward"]["structure"] > 0 and r["main_defined"] for r in rows])
    )
    out["syntax_rate"] = float(np.mean([r["reward"]["syntax"] > 0 for r in rows]))
    for name, value in RATES.items():
        per_row = [v for v in map(value, rows) if v is not None]
        per_problem = problem_rates(by_problem, value)
        out[name] = float(np.mean(per_row)) if per_row else None
        out[f"{name}_ci95"] = (
            list(bootstrap_ci(per_problem, resamples, seed)) if per_problem else None
        )
    if any("robust_pass_rate" in r for r in rows):
        out["all_trivial_problems"] = sum(  # problems whose every assert a constant passes
            all("robust_pass_rate" in r and r["robust_pass_rate"] is None for r in v)
            for v in by_problem.values()
        )
    return {**out, **_tokens(rows)}


def _tokens(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    return {"new_tokens_mean": sum(r["new_tokens"] for r in rows) / len(rows)}


def speed(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Generation speed over rows with their `seconds`: a timing, not a result (it differs between
    two runs of the same code), so it is written to paths.timing(method), out of git."""
    seconds = sum(r["seconds"] for r in rows)
    tokens = sum(r["new_tokens"] for r in rows)
    return {
        "response_seconds_mean": seconds / len(rows),
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
    }


def text_metrics(
    rows: Sequence[dict[str, Any]],
    by_problem: dict[str, list[dict[str, Any]]],
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Metrics of a text environment's rows: the return and each part of its reward (the keys of
    the rows' `reward` record besides `total`), each a mean with a 95% CI over tasks."""
    parts = [k for k in rows[0]["reward"] if k != "total"]
    out: dict[str, Any] = {
        "problems": len(by_problem),
        "samples": len(rows),
        "n_per_problem": min(len(v) for v in by_problem.values()),
        "reward_parts": parts,
    }
    for name, key in [("return", "total"), *((p, p) for p in parts)]:
        per_problem = problem_rates(by_problem, lambda r, key=key: float(r["reward"][key]))
        out[f"{name}_mean"] = float(np.mean(per_problem))
        out[f"{name}_ci95"] = list(bootstrap_ci(per_problem, resamples, seed))
    return {**out, **_tokens(rows)}
