"""Two methods over several seeds, each seed's pair of runs paired over its own held-out problems.

    python -m orchestry.eval.seeds reports/gpu_team1,reports/gpu_single1:single_grpo \
        reports/gpu_team2,reports/gpu_single2:single_grpo --out reports/gpu_seeds

One training run per setting cannot tell a method from the spread between runs of it (two runs of one
config, one cooperating and one not, are in reports/gpu_ablation). Each argument is a pair
`RUN,AGAINST` of experiment reports (`REPORT` or `REPORT:METHOD`, as in `orchestry.eval.ablation`;
default method `magrpo`, the trained team), each with its per_problem.csv, trained with the same seed:
`seed` also draws the split, so runs of two seeds answer different problems, and only the runs of one
seed can be paired problem by problem. Per held-out set (and `all`, pooled) and metric:

- each pair's values and its paired difference (RUN − AGAINST) with the 95% paired bootstrap CI over
  the problems both answered (`orchestry.eval.paired`);
- the mean of the pairs' differences with a 95% CI that resamples both levels: the pairs (seeds), then
  the problems within each. With few seeds it is wide, as it should be: it carries the spread between
  seeds, which one pair's CI over problems leaves out;
- how many RUN reports stopped cooperating: held-out coop rate below `COLLAPSED` (0.05).

`REPORT:METHOD+reference_aux` is the team's main joined with the reference helper (per_problem.csv's
`main_with_reference_aux`, the warm start's gate's measure; `orchestry.eval.ablation.team_values`): its
pass@1 alone. Paired with the team it
is what the team's own helper costs; paired with another method, whether a perfect helper would have
closed the gap.

Writes `seeds.csv` (one row per pair and one per mean), `seeds.md` and `manifest.json` into `--out`,
replaced as a whole; a report without per_problem.csv or the method's rows, or a pair without a
problem in common, is an error naming it, and nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestry.eval.ablation import AblationError, label, parse_source, team_values
from orchestry.eval.paired import ALL_SETS, CODE_METRICS, diff_cells, paired_difference
from orchestry.eval.tool_folder import csv_text, write_folder

COLLAPSED = 0.05  # held-out coop rate below this: the run no longer cooperates
COLUMNS = (
    "row",
    "heldout_set",
    "metric",
    "run",
    "against",
    "n_pairs",
    "n_problems",
    "run_value",
    "against_value",
    "diff",
    "ci_low",
    "ci_high",
)
Values = dict[str, dict[str, dict[str, float]]]  # metric -> held-out set -> problem id -> value


def load_pair(arg: str, method: str) -> tuple[tuple[str, Values], tuple[str, Values]]:
    """`RUN,AGAINST` -> ((label, values), (label, values)), each `REPORT[:METHOD]`."""
    parts = arg.split(",")
    if len(parts) != 2 or not all(parts):
        raise AblationError(f"{arg!r}: a pair is RUN,AGAINST (two reports, REPORT[:METHOD] each)")
    out = []
    for part in parts:
        folder, named = parse_source(part, method)
        out.append((label(folder, named, method), team_values(folder, named)))
    return out[0], out[1]


def two_level_ci(diffs: Sequence[np.ndarray], resamples: int, seed: int) -> tuple[float, float]:
    """95% CI of the mean over pairs of each pair's mean per-problem difference, resampling the
    pairs, then the problems within each resampled pair."""
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for b in range(resamples):
        picked = rng.integers(0, len(diffs), len(diffs))
        means[b] = np.mean(
            [diffs[i][rng.integers(0, len(diffs[i]), len(diffs[i]))].mean() for i in picked]
        )
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def seed_rows(
    pairs: Sequence[tuple[tuple[str, Values], tuple[str, Values]]], resamples: int, seed: int
) -> list[dict[str, Any]]:
    """Per held-out set and metric: one `pair` row per pair, then one `mean` row over the pairs."""
    out: list[dict[str, Any]] = []
    sides = [values for pair in pairs for _, values in pair]
    sets = sorted({h for v in sides for by_set in v.values() for h in by_set} - {ALL_SETS})
    for heldout in [ALL_SETS, *sets]:
        for metric in CODE_METRICS:
            diffs, rows = [], []
            for (run_name, run), (other_name, other) in pairs:
                mine = run.get(metric, {}).get(heldout, {})
                theirs = other.get(metric, {}).get(heldout, {})
                shared = sorted(set(mine) & set(theirs))
                if not shared:
                    continue
                d = paired_difference(mine, theirs, resamples, seed)
                diffs.append(np.array([mine[p] - theirs[p] for p in shared]))
                rows.append(
                    {
                        "row": "pair",
                        "heldout_set": heldout,
                        "metric": metric,
                        "run": run_name,
                        "against": other_name,
                        "n_pairs": 1,
                        "n_problems": len(shared),
                        "run_value": d["team_value"],
                        "against_value": d["method_value"],
                        "diff": d["diff"],
                        "ci_low": d["ci_low"],
                        "ci_high": d["ci_high"],
                    }
                )
            if not rows:
                continue
            low, high = two_level_ci(diffs, resamples, seed)
            mean = {
                "row": "mean",
                "heldout_set": heldout,
                "metric": metric,
                "run": "",
                "against": "",
                "n_pairs": len(rows),
                "n_problems": sum(r["n_problems"] for r in rows),
                "run_value": float(np.mean([r["run_value"] for r in rows])),
                "against_value": float(np.mean([r["against_value"] for r in rows])),
                "diff": float(np.mean([r["diff"] for r in rows])),
                "ci_low": low,
                "ci_high": high,
            }
            out += [*rows, mean]
    for (run_name, _), (other_name, _) in pairs:
        if not any(r["run"] == run_name and r["against"] == other_name for r in out):
            raise AblationError(f"{run_name},{other_name}: no held-out problem in common")
    return out


def collapsed(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The RUN reports whose pooled held-out coop rate is below COLLAPSED."""
    return [
        r["run"]
        for r in rows
        if r["row"] == "pair"
        and r["heldout_set"] == ALL_SETS
        and r["metric"] == "coop_rate"
        and r["run_value"] < COLLAPSED
    ]


def seeds_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    pooled = [r for r in rows if r["row"] == "pair" and r["heldout_set"] == ALL_SETS]
    runs = list({(r["run"], r["against"]): r for r in pooled}.values())  # each pair once, in order
    down = collapsed(rows)
    lines = [
        f"# {len(runs)} seeds, each a pair of runs (paired over the held-out problems of its seed)",
        "",
        "Written by `python -m orchestry.eval.seeds`; do not edit. Pairs: "
        + ", ".join(f"`{r['run']}` − `{r['against']}`" for r in runs)
        + ". diff = run − against, each problem's samples averaged first; a pair's 95% CI is paired "
        "over its problems, the mean's resamples the pairs and the problems within them. **Bold** "
        "(and `*`): the CI excludes 0.",
        "",
        f"Runs no longer cooperating (held-out coop rate < {COLLAPSED}): {len(down)} of {len(runs)}"
        f" ({', '.join(down) or 'none'}).",
        "",
        "| held-out set | metric | pair | problems | run | against | diff | 95% CI |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff, ci = diff_cells(r)
        name = (
            f"{r['run']} − {r['against']}" if r["row"] == "pair" else f"**mean of {r['n_pairs']}**"
        )
        cells = [
            r["heldout_set"],
            r["metric"],
            name,
            str(r["n_problems"]),
            f"{r['run_value']:.3f}",
            f"{r['against_value']:.3f}",
            diff,
            ci,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_seeds(
    out: Path, pairs: Sequence[str], method: str, resamples: int, seed: int
) -> list[dict[str, Any]]:
    """The folder, replaced as a whole (nothing written when a report is unusable)."""
    started = time.time()
    rows = seed_rows([load_pair(p, method) for p in pairs], resamples, seed)
    params = {"pairs": list(pairs), "method": method, "resamples": resamples, "seed": seed}
    command = ["python -m orchestry.eval.seeds", *pairs, "--out", str(out)]
    command += [] if method == "magrpo" else ["--method", method]
    table = csv_text(COLUMNS, rows)
    write_folder(
        out, "seeds", table, seeds_markdown(rows), "orchestry.eval.seeds", params, command, started
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.eval.seeds", description=__doc__.splitlines()[0]
    )
    parser.add_argument("pairs", nargs="+", help="RUN,AGAINST: two reports of one seed")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--method", default="magrpo", help="the method of a REPORT without :METHOD")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        rows = write_seeds(args.out, args.pairs, args.method, args.resamples, args.seed)
    except AblationError as err:  # as orchestry.eval.ablation: a report that cannot be compared
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{sum(r['row'] == 'mean' for r in rows)} comparisons -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
