"""Levers measured against a reference run, paired over the same held-out problems.

    python -m orchestry.eval.ablation reports/gpu_team reports/gpu_gate_scaled reports/gpu_tools \
        --out reports/gpu_ablation

Each argument is an experiment report (`python -m orchestry.bookkeeping.experiment`) with its `per_problem.csv`,
optionally `REPORT:METHOD` to read another method than `--method` (default `magrpo`, the trained team);
the first is the reference. For every other one, its method minus the reference's, per held-out set and
pooled (`all`), for pass@1, test pass rate, coop rate and return, with the 95% paired bootstrap CI of
`orchestry.eval.paired` over the problems both answered. The settings shown are the params keys where
its params.yaml differs from the reference's (keys one of them lacks, from older code, are left out). Writes
`ablation.csv`, `ablation.md` and `manifest.json` into `--out` (replaced as a whole); a report without
per_problem.csv, or without the method's rows, is an error naming it, and nothing is written.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from orchestry.eval.paired import ALL_SETS, CODE_METRICS, diff_cells, paired_difference
from orchestry.eval.tool_folder import csv_text, write_folder

REFERENCE_AUX = "+reference_aux"  # METHOD+reference_aux: its main with the reference helper
REFERENCE_METRIC = "main_with_reference_aux"  # per_problem.csv's (paired.PROBLEM_METRICS)

COLUMNS = (
    "lever",
    "settings",
    "heldout_set",
    "n_problems",
    "metric",
    "reference_value",
    "lever_value",
    "diff",
    "ci_low",
    "ci_high",
)


class AblationError(ValueError):
    """A report that cannot be compared; the message names it."""


def parse_source(arg: str, method: str) -> tuple[Path, str]:
    """`REPORT` or `REPORT:METHOD` -> (report folder, method)."""
    folder, sep, named = arg.rpartition(":")
    return (Path(folder), named) if sep and named and "/" not in named else (Path(arg), method)


def label(report: Path, method: str, default: str) -> str:
    return report.name if method == default else f"{report.name}:{method}"


def team_values(report: Path, method: str) -> dict[str, dict[str, dict[str, float]]]:
    """metric -> held-out set -> {problem id: value} of `method` in a report's per_problem.csv.
    `METHOD+reference_aux` is that method's main joined with the reference helper (the column
    `main_with_reference_aux`, the warm start's gate's measure): its pass@1 alone."""
    table = report / "per_problem.csv"
    if not table.is_file():
        raise AblationError(
            f"{table}: no such file (made by python -m orchestry.bookkeeping.experiment)"
        )
    team = method.removesuffix(REFERENCE_AUX)
    with table.open() as f:
        rows = [r for r in csv.DictReader(f) if r["method"] == team]
    if not rows:
        raise AblationError(f"{table}: no rows of method {team!r}")
    out: dict[str, dict[str, dict[str, float]]] = {}
    if team != method:  # its main joined with the reference helper: that pass@1 alone
        for r in rows:
            if r.get(REFERENCE_METRIC, "") != "":
                for heldout in (ALL_SETS, r["heldout_set"]):
                    value = float(r[REFERENCE_METRIC])
                    out.setdefault("pass@1", {}).setdefault(heldout, {})[r["problem_id"]] = value
        if not out:
            raise AblationError(f"{table}: no {REFERENCE_METRIC} of method {team!r}")
        return out
    for metric in CODE_METRICS:
        for r in rows:
            if r.get(metric, "") == "":  # no value, or a file from before the metric existed
                continue
            for heldout in (ALL_SETS, r["heldout_set"]):
                out.setdefault(metric, {}).setdefault(heldout, {})[r["problem_id"]] = float(
                    r[metric]
                )
    return out


def settings_apart(
    reference: Mapping[str, Any], lever: Mapping[str, Any], prefix: str = ""
) -> list[str]:
    """`key=value` for every params key where `lever` differs from `reference` (dotted keys)."""
    out = []
    for key in sorted(set(reference) | set(lever)):
        a, b = reference.get(key), lever.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += settings_apart(a, b, name + ".")
        elif key in reference and key in lever and a != b:
            out.append(f"{name}={b}")
    return out


def ablation_rows(
    reference: str, levers: Sequence[str], method: str, resamples: int, seed: int
) -> list[dict[str, Any]]:
    """One row (`COLUMNS`) per lever x held-out set x metric: the lever's method minus the
    reference's (each a `REPORT` or `REPORT:METHOD`, see `parse_source`)."""
    ref_dir, ref_method = parse_source(reference, method)
    base = team_values(ref_dir, ref_method)
    base_params = yaml.safe_load((ref_dir / "params.yaml").read_text())
    out = []
    for arg in levers:
        folder, lever_method = parse_source(arg, method)
        name = label(folder, lever_method, method)
        values = team_values(folder, lever_method)
        params = yaml.safe_load((folder / "params.yaml").read_text())
        settings = " ".join(settings_apart(base_params, params)) or "(none)"
        for metric, by_set in values.items():
            for heldout, problems in by_set.items():
                shared = set(problems) & set(base.get(metric, {}).get(heldout, {}))
                if not shared:
                    continue
                diff = paired_difference(problems, base[metric][heldout], resamples, seed)
                out.append(
                    {
                        "lever": name,
                        "settings": settings,
                        "heldout_set": heldout,
                        "n_problems": len(diff.pop("problems")),
                        "metric": metric,
                        "reference_value": diff.pop("method_value"),
                        "lever_value": diff.pop("team_value"),
                        **diff,
                    }
                )
        if not any(r["lever"] == name for r in out):
            raise AblationError(f"{arg}: no held-out problem in common with {reference}")
    return out


def ablation_markdown(rows: Sequence[Mapping[str, Any]], reference: str, method: str) -> str:
    folder, ref_method = parse_source(reference, method)
    lines = [
        f"# Against `{label(folder, ref_method, method)}` (paired over the same held-out problems)",
        "",
        f"Written by `python -m orchestry.eval.ablation`; do not edit. A row is a report's `{method}` "
        "(or `report:method`); diff = row − reference, "
        "each problem's samples averaged first; 95% paired bootstrap CI over the problems both "
        "answered. **Bold** (and `*`): the CI excludes 0.",
        "",
        "| Lever | settings | held-out set | problems | metric | reference | lever | diff | 95% CI |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        diff, ci = diff_cells(r)
        cells = [
            r["lever"],
            f"`{r['settings']}`",
            r["heldout_set"],
            str(r["n_problems"]),
            r["metric"],
            f"{r['reference_value']:.3f}",
            f"{r['lever_value']:.3f}",
            diff,
            ci,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_ablation(
    out: Path, reference: str, levers: Sequence[str], method: str, resamples: int, seed: int
) -> list[dict[str, Any]]:
    """The ablation folder, replaced as a whole (nothing written when a report is unusable)."""
    started = time.time()
    rows = ablation_rows(reference, levers, method, resamples, seed)
    params = {
        "reference": reference,
        "levers": list(levers),
        "method": method,
        "resamples": resamples,
        "seed": seed,
    }
    command = ["python -m orchestry.eval.ablation", reference, *levers, "--out", str(out)]
    command += [] if method == "magrpo" else ["--method", method]
    markdown = ablation_markdown(rows, reference, method)
    table = csv_text(COLUMNS, rows)
    write_folder(
        out, "ablation", table, markdown, "orchestry.eval.ablation", params, command, started
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.eval.ablation", description=__doc__.splitlines()[0]
    )
    parser.add_argument("reference", help="the reference run's report folder (REPORT[:METHOD])")
    parser.add_argument("levers", nargs="+", help="report folders to compare (REPORT[:METHOD])")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--method", default="magrpo", help="the method compared (default magrpo)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        rows = write_ablation(
            args.out, args.reference, args.levers, args.method, args.resamples, args.seed
        )
    except AblationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows -> {args.out}/ablation.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
