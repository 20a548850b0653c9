"""Paired comparisons: the trained team against every other method, on the problems both answered.

Two methods answer the same held-out problems, so their difference is measured per problem and the
bootstrap resamples problems for both at once (the same indices): the variation between problems,
which both methods share, cancels, and a real difference can stand out where the marginal CIs of
`metrics.py` overlap. Per problem, each metric is first the mean over its rows (samples):

    pass@1                 fraction correct = the unbiased pass@k estimator at k = 1
                           (`metrics.pass_at_k`)
    test_pass_rate         fraction of asserts passed (`metrics.RATES`)
    robust_test_pass_rate  fraction of the asserts no constant answer passes (`metrics.RATES`);
                           rows without it (older runs, all-trivial problems) are left out
    coop_rate              main calls aux and uses it in a program passing >= 1 test
    return                 the total reward

A problem's held-out set is the source prefix of its id (`<source>/<name>`: `coop/count_evens`,
`humaneval/HumanEval/0`, `story/001`); rows carry no source field of their own. Every set is
compared apart, and `all` pools them. Text environments (rows without `correct`) get the return
only.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from orchestry.eval.metrics import RATES, bootstrap_ci

TEAM = "magrpo"
ALL_SETS = "all"
COLUMNS = (
    "heldout_set",
    "n_problems",
    "n_samples",
    "metric",
    "method",
    "team_value",
    "method_value",
    "diff",
    "ci_low",
    "ci_high",
)
Row = Mapping[str, Any]
CODE_METRICS: dict[str, Callable[[Row], float | None]] = {
    "pass@1": lambda r: float(r["correct"]),
    "test_pass_rate": RATES["test_pass_rate"],
    "robust_test_pass_rate": RATES["robust_test_pass_rate"],
    "coop_rate": RATES["coop_rate"],
    "return": lambda r: float(r["reward"]["total"]),
}
TEXT_METRICS = {"return": CODE_METRICS["return"]}
PROBLEM_METRICS: dict[str, Callable[[Row], float | None]] = {
    "main_with_reference_aux": lambda r: (
        None if r.get("main_correct_ref_aux") is None else float(r["main_correct_ref_aux"])
    ),
}
"""Kept per problem in reports (per_problem.csv), not paired: main's code joined with the
reference helper passes every test (the warm start's gate reads it: `orchestry.eval.gate`)."""


def heldout_set(problem_id: str) -> str:
    """The source prefix of a problem id (`coop/count_evens` -> `coop`)."""
    source, sep, name = problem_id.partition("/")
    if not (source and sep and name):
        raise ValueError(f"problem id {problem_id!r} is not '<source>/<name>'")
    return source


def by_problem(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """Problem id -> its rows, in order."""
    out: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        out[row["problem_id"]].append(row)
    return dict(out)


def problem_means(
    grouped: Mapping[str, Sequence[Row]], value: Callable[[Row], float | None]
) -> dict[str, float]:
    """Problem id -> the mean of `value` over its rows that have one (a problem with none: left
    out)."""
    out = {}
    for pid, rows in grouped.items():
        vals = [v for v in map(value, rows) if v is not None]
        if vals:
            out[pid] = float(np.mean(vals))
    return out


def paired_difference(
    team: Mapping[str, float], other: Mapping[str, float], resamples: int, seed: int
) -> dict[str, Any]:
    """Mean team - other over the problems both have, with its 95% paired bootstrap CI.

    Resampling the per-problem differences is resampling the same problems for both methods."""
    shared = sorted(set(team) & set(other))
    if not shared:
        raise ValueError("no problem in common to pair")
    t = np.array([team[p] for p in shared])
    o = np.array([other[p] for p in shared])
    lo, hi = bootstrap_ci(t - o, resamples, seed)
    return {
        "problems": shared,
        "team_value": float(t.mean()),
        "method_value": float(o.mean()),
        "diff": float((t - o).mean()),
        "ci_low": lo,
        "ci_high": hi,
    }


def paired_rows(
    rows_by_method: Mapping[str, Sequence[Row]], resamples: int, seed: int, team: str = TEAM
) -> list[dict[str, Any]]:
    """One row (`COLUMNS`) per held-out set x metric x method: `team` minus that method.

    Sets: `all`, then each source in order. Only problems both methods answered count
    (`n_problems`); `n_samples` is the fewest samples any of those problems has in either method."""
    if team not in rows_by_method:
        raise ValueError(f"no rows of the team {team!r}; methods: {sorted(rows_by_method)}")
    grouped = {m: by_problem(rows) for m, rows in rows_by_method.items()}
    for method, problems in grouped.items():
        if not problems:
            raise ValueError(f"method {method!r} has no rows to compare")
    sources = sorted({heldout_set(p) for g in grouped.values() for p in g})
    out = []
    for heldout in [ALL_SETS, *sources]:
        for method in grouped:
            if method == team:
                continue
            pair = {m: _in_set(grouped[m], heldout) for m in (team, method)}
            shared = set(pair[team]) & set(pair[method])
            if heldout == ALL_SETS and not shared:
                raise ValueError(f"{team} and {method} answered no problem in common")
            if not shared:
                continue
            n_samples = min(len(pair[m][p]) for m in pair for p in shared)
            text = not all("correct" in g[p][0] for g in pair.values() for p in shared)
            for metric, value in (TEXT_METRICS if text else CODE_METRICS).items():
                means = [problem_means(pair[m], value) for m in (team, method)]
                if not set(means[0]) & set(means[1]):  # no shared problem has it (older rows)
                    continue
                diff = paired_difference(*means, resamples, seed)
                out.append(
                    {
                        "heldout_set": heldout,
                        "n_problems": len(diff.pop("problems")),
                        "n_samples": n_samples,
                        "metric": metric,
                        "method": method,
                        **diff,
                    }
                )
    return out


def _in_set(problems: Mapping[str, Sequence[Row]], heldout: str) -> dict[str, Sequence[Row]]:
    if heldout == ALL_SETS:
        return dict(problems)
    return {p: rows for p, rows in problems.items() if heldout_set(p) == heldout}


PER_PROBLEM = (
    "method",
    "heldout_set",
    "problem_id",
    "n_samples",
    *CODE_METRICS,
    *PROBLEM_METRICS,
)


def per_problem_rows(rows_by_method: Mapping[str, Sequence[Row]]) -> list[dict[str, Any]]:
    """One row (`PER_PROBLEM`) per method x problem: each metric's mean over the problem's samples
    (None where the rows have no such value: text environments have the return only). Reports keep
    these, so runs can be paired over problems later (`orchestry.eval.ablation`)."""
    out = []
    for method, rows in rows_by_method.items():
        for pid, group in by_problem(rows).items():
            text = "correct" not in group[0]
            values = {
                metric: problem_means({pid: group}, value).get(pid)
                for metric, value in (CODE_METRICS | PROBLEM_METRICS).items()
                if not text or metric in TEXT_METRICS
            }
            out.append(
                {
                    "method": method,
                    "heldout_set": heldout_set(pid),
                    "problem_id": pid,
                    "n_samples": len(group),
                    **{m: values.get(m) for m in (*CODE_METRICS, *PROBLEM_METRICS)},
                }
            )
    return out


def per_problem_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """reports/<name>/per_problem.csv: the header `PER_PROBLEM`, an empty cell for no value."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PER_PROBLEM)
    for r in rows:
        writer.writerow(
            "" if r[c] is None else f"{r[c]:.6f}" if isinstance(r[c], float) else r[c]
            for c in PER_PROBLEM
        )
    return buffer.getvalue()


def paired_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """reports/paired.csv: the header `COLUMNS`, one line per paired row."""
    lines = [",".join(COLUMNS)]
    for r in rows:
        cells = [f"{r[c]:.6f}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS]
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def excludes_zero(row: Mapping[str, Any]) -> bool:
    """The paired CI lies wholly above or wholly below 0."""
    return row["ci_low"] > 0 or row["ci_high"] < 0


def diff_cells(row: Mapping[str, Any]) -> tuple[str, str]:
    """A row's diff and 95% CI as markdown cells, in bold (and the CI marked `*`) when it excludes 0."""
    diff, ci = f"{row['diff']:+.3f}", f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]"
    return (f"**{diff}**", f"**{ci}** *") if excludes_zero(row) else (diff, ci)


def paired_markdown(rows: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> str:
    """The results.md section of the paired differences (`labels`: method -> its name there)."""
    lines = [
        "## Paired differences (team − method, 95% paired bootstrap CI over the same problems)",
        "",
        "Each problem's samples are averaged first; the bootstrap resamples the problems both "
        "methods answered, the same ones for both. **Bold** (and `*`): the CI excludes 0. "
        f"`{ALL_SETS}` pools the held-out sets; the others are the problems' sources.",
        "",
        "| Held-out set | problems | samples | metric | method | team value | method value "
        "| diff | 95% CI |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff, ci = diff_cells(r)
        cells = [
            r["heldout_set"],
            str(r["n_problems"]),
            str(r["n_samples"]),
            r["metric"],
            labels.get(r["method"], r["method"]),
            f"{r['team_value']:.3f}",
            f"{r['method_value']:.3f}",
            diff,
            ci,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
