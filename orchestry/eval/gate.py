"""The warm start's pre-registered gate (issue #57; docs/findings.md, "Pre-registration: the warm
start"): whether a team-vs-single comparison after the warm start can be read at all.

On the compositional held-out set, 8 samples a problem, after the warm start and before any RL:
GO when the single agent's pass@1 lies in [`PASS_LOW`, `PASS_HIGH`] (a floor would measure nothing
but the trivial asserts, a ceiling leaves nothing to gain) and the team's main agent joined with
the reference `aux` is correct more often than that by at least `HEADROOM` (what a perfect helper
could add, the most cooperation can pay). The thresholds are the registration's: never changed
after a run was seen.

`python -m orchestry.eval.gate REPORT` reads the numbers from an experiment's report (run with
`evaluate.adapters: warm_start`) and writes REPORT/gate.json with the commit and code that made it.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

from orchestry import io
from orchestry.bookkeeping.provenance import hardware, manifest
from orchestry.bookkeeping.recovered import tool_code

PASS_LOW, PASS_HIGH = 0.05, 0.90
HEADROOM = 0.03
COMPOSE = "gen_compose"
"""The held-out set the gate reads (envs/code/generated/heldout.py)."""
MAIN_REF = "main_with_reference_aux"
"""per_problem.csv's column: the team's main joined with the reference aux, correct."""
GATE_KEYS = ("single_pass_at_1", "main_with_reference_aux", "headroom", "problems")


class GateError(ValueError):
    """A report the gate cannot read (the message names the file and what is missing)."""


def warm_start_gate(single_pass_at_1: float, main_with_reference_aux: float) -> dict[str, Any]:
    """The two gate numbers, each test and the verdict (`GO` or `NO-GO`), as gate.json holds them."""
    for name, value in (
        ("single_pass_at_1", single_pass_at_1),
        ("main_with_reference_aux", main_with_reference_aux),
    ):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a rate in [0, 1], got {value}")
    in_range = PASS_LOW <= single_pass_at_1 <= PASS_HIGH
    headroom = round(main_with_reference_aux - single_pass_at_1, 9)  # 0.72 - 0.69 is 0.03
    go = in_range and headroom >= HEADROOM
    return {
        "single_pass_at_1": single_pass_at_1,
        "main_with_reference_aux": main_with_reference_aux,
        "single_in_range": in_range,
        "range": [PASS_LOW, PASS_HIGH],
        "headroom": headroom,
        "min_headroom": HEADROOM,
        "verdict": "GO" if go else "NO-GO",
    }


def gate_numbers(report: Path, heldout: str = COMPOSE) -> tuple[float, float, int]:
    """From a report's per_problem.csv (an experiment run with `evaluate.adapters: warm_start`):
    the single agent's (`single_grpo`) pass@1 and the team's (`magrpo`) main-with-reference-aux
    rate on `heldout`, each the mean over its problems, and the number of problems."""
    table = report / "per_problem.csv"
    if not table.is_file():
        raise GateError(
            f"{table}: no such file (made by python -m orchestry.bookkeeping.experiment)"
        )
    with table.open() as f:
        rows = [r for r in csv.DictReader(f) if r["heldout_set"] == heldout]
    single = [float(r["pass@1"]) for r in rows if r["method"] == "single_grpo"]
    main_ref = [
        float(r[MAIN_REF]) for r in rows if r["method"] == "magrpo" and r.get(MAIN_REF, "") != ""
    ]
    if not single or not main_ref:
        raise GateError(
            f"{table}: needs rows of single_grpo (pass@1) and magrpo ({MAIN_REF}) on {heldout}; "
            f"found {len(single)} and {len(main_ref)}"
        )
    if len(single) != len(main_ref):
        raise GateError(f"{table}: {len(single)} single_grpo problems, {len(main_ref)} magrpo")
    return sum(single) / len(single), sum(main_ref) / len(main_ref), len(single)


def write_gate(report: Path, out: Path) -> dict[str, Any]:
    """`out` (gate.json): the gate on `report`'s numbers, with the commit and code that made it."""
    started = time.time()
    single, main_ref, n = gate_numbers(report)
    record = {**warm_start_gate(single, main_ref), "heldout_set": COMPOSE, "problems": n}
    record["report"] = str(report)
    root = Path(__file__).resolve().parents[2]
    params = {"report": str(report)}
    made = manifest(root, tool_code("orchestry.eval.gate"), params, hardware(), started, 0.0)
    made["command"] = f"python -m orchestry.eval.gate {report} --out {out}"
    record["manifest"] = made
    io.write_json(out, record)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.eval.gate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("report", type=Path, help="the warm-start run's report folder")
    parser.add_argument("--out", type=Path, help="default: REPORT/gate.json")
    args = parser.parse_args(argv)
    try:
        record = write_gate(args.report, args.out or args.report / "gate.json")
    except GateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{record['verdict']}: {json.dumps({k: record[k] for k in GATE_KEYS})}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
