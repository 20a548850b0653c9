"""Issue 57's registered comparison in one table: the warm-started team against every arm, before and
after RL, over the seeds whose reports are in.

    python -m orchestry.eval.arms reports/gpu_sft --out reports/gpu_sft_comparison

PREFIX names the reports by the comparison's conventions (`workflow/scripts/sft_comparison.sh` and the
controls' configs, `workflow/experiments/control_*.yaml`): `PREFIX_ws<seed>` is the warm start evaluated
before RL and `PREFIX_rl<seed>` after RL, each with the team (`magrpo`) and the single agent
(`single_grpo`); a control's reports are `PREFIX_<control>_ws<seed>` and `PREFIX_<control>_rl<seed>`.
The arms (`ARMS`): the single agent, the four registered controls, and every baseline of the base model
(a method other than those two in `PREFIX_ws<seed>`, `PREFIX_rl<seed>`, or, when its `split.json` draws
the same problems as the seed's, in `PREFIX_base<seed>` (a run of the baselines alone on the seed's
split) or `PREFIX` itself). The base model is not trained, so a baseline pairs with the team at both
stages.

For each stage (`before_rl`, `after_rl`) and arm, the seeds that have both the team's report and the
arm's are paired as `orchestry.eval.seeds` pairs them: each seed over its own held-out problems, then the
mean of the seeds' differences with a CI resampling seeds and problems. Writes `arms.csv` (every
pair's row and every mean's, with its stage and arm), `arms.md` (the means, and which registered arm
or pipeline baseline has, at a stage, fewer seeds than `REGISTERED_SEEDS`) and `manifest.json` into
`--out`, replaced as a whole; no report of the team under PREFIX is an error, and nothing is written.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestry.eval.ablation import AblationError, label, team_values
from orchestry.eval.paired import ALL_SETS, diff_cells
from orchestry.eval.seeds import COLUMNS as SEED_COLUMNS
from orchestry.eval.seeds import seed_rows
from orchestry.eval.tool_folder import csv_text, write_folder

TEAM, SINGLE = "magrpo", "single_grpo"
# arm -> (the reports' infix, the method in them); "" is the comparison's own reports
ARMS = {
    "single": ("", SINGLE),
    "single_steps": ("steps", SINGLE),  # control_single_steps.yaml
    "single_contract": ("contract", SINGLE),  # control_single_contract.yaml
    "single_512": ("512", SINGLE),  # control_single_512.yaml
    "team_shared": ("shared", TEAM),  # model.shared_adapter: true
}
STAGES = {"before_rl": "ws", "after_rl": "rl"}
BASE = "base"  # PREFIX_base<seed>: the base model's baselines alone, on the seed's split
# the pipeline's baseline stages (params.BASELINE_NAMES; eval does not see params: a test ties them)
REGISTERED_BASELINES = tuple(
    f"baseline:{name}" for name in ("single", "naive_concat", "sequential", "discussion")
)
REGISTERED_SEEDS = (0, 1, 2, 3)
SHOWN = ("pass@1", "robust_test_pass_rate", "coop_rate")
COLUMNS = ("stage", "arm", *SEED_COLUMNS)


def report(prefix: Path, infix: str, stage: str, seed: int) -> Path:
    name = f"{prefix.name}_{infix}_{stage}{seed}" if infix else f"{prefix.name}_{stage}{seed}"
    return prefix.with_name(name)


def seeds_of(prefix: Path, stage: str) -> list[int]:
    """The seeds with a team report of the stage (`PREFIX_<stage><seed>/per_problem.csv`)."""
    pattern = re.compile(re.escape(prefix.name) + "_" + stage + r"(\d+)$")
    found = (pattern.match(p.name) for p in prefix.parent.glob(f"{prefix.name}_{stage}*"))
    return sorted(
        int(m.group(1))
        for m in found
        if m and (prefix.parent / m.group(0) / "per_problem.csv").is_file()
    )


def methods_of(folder: Path) -> set[str]:
    table = folder / "per_problem.csv"
    if not table.is_file():
        return set()
    with table.open() as f:
        return {r["method"] for r in csv.DictReader(f)}


def drawn(folder: Path) -> Any:
    """What a report's split.json says of its problems: the seed, the sets and what was dropped."""
    path = folder / "split.json"
    if not path.is_file():
        return None
    split = json.loads(path.read_text())
    return [split.get(k) for k in ("seed", "sets", "dropped_over_budget")]


def baseline_sources(prefix: Path, seed: int) -> dict[str, Path]:
    """Baseline method -> the report of this seed's split it is read from (the first that has it)."""
    folders = [report(prefix, "", tag, seed) for tag in STAGES.values()]
    mine = next((d for d in map(drawn, folders) if d is not None), None)
    if mine is not None:
        folders += [f for f in (report(prefix, "", BASE, seed), prefix) if drawn(f) == mine]
    out: dict[str, Path] = {}
    for folder in folders:
        for method in sorted(methods_of(folder) - {TEAM, SINGLE}):
            out.setdefault(method, folder)
    return out


def arm_rows(prefix: Path, resamples: int, seed: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Every (stage, arm) with a seed in: seed_rows's rows with the stage and arm; and what is
    missing from the registered design (an arm and stage with fewer seeds than registered)."""
    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    for stage, tag in STAGES.items():
        team_seeds = seeds_of(prefix, tag)
        arms: dict[str, dict[int, tuple[Path, str]]] = {}
        for arm, (infix, method) in ARMS.items():
            arms[arm] = {
                s: (report(prefix, infix, tag, s), method)
                for s in team_seeds
                if method in methods_of(report(prefix, infix, tag, s))
            }
        for s in team_seeds:
            for method, folder in baseline_sources(prefix, s).items():
                arms.setdefault(f"baseline:{method}", {})[s] = (folder, method)
        for arm in REGISTERED_BASELINES:  # one no seed has is missing too
            arms.setdefault(arm, {})
        teams = {  # each seed's team, read once for every arm it is paired with
            s: (
                label(report(prefix, "", tag, s), TEAM, TEAM),
                team_values(report(prefix, "", tag, s), TEAM),
            )
            for s in team_seeds
        }
        for arm, by_seed in arms.items():
            have = sorted(by_seed)
            if (arm in ARMS or arm in REGISTERED_BASELINES) and len(have) < len(REGISTERED_SEEDS):
                missing.append(f"{stage} {arm}: seeds {', '.join(map(str, have)) or 'none'}")
            if not have:
                continue
            pairs = [
                (teams[s], (label(folder, method, TEAM), team_values(folder, method)))
                for s, (folder, method) in sorted(by_seed.items())
            ]
            rows += [{"stage": stage, "arm": arm, **r} for r in seed_rows(pairs, resamples, seed)]
    if not rows:
        raise AblationError(
            f"{prefix}_ws<seed>, {prefix}_rl<seed>: no report of the team to compare "
            "(bash workflow/scripts/sft_comparison.sh writes them)"
        )
    return rows, missing


def arms_markdown(rows: Sequence[Mapping[str, Any]], missing: Sequence[str], prefix: Path) -> str:
    lines = [
        "# The warm-started team against every arm, before and after RL",
        "",
        f"Written by `python -m orchestry.eval.arms {prefix}`; do not edit. diff = team − arm, each seed "
        "paired over its own held-out problems, the mean's 95% CI resampling the seeds and the problems "
        "within them (every seed's own row: `arms.csv`). **Bold** (and `*`): the CI excludes 0.",
        "",
        "Fewer seeds than registered ("
        + ", ".join(map(str, REGISTERED_SEEDS))
        + "): "
        + ("; ".join(missing) if missing else "none")
        + ".",
        "",
        "| stage | arm | held-out set | metric | seeds | team | arm | diff | 95% CI |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["row"] != "mean" or r["metric"] not in SHOWN or r["heldout_set"] == ALL_SETS:
            continue
        diff, ci = diff_cells(r)
        cells = [
            r["stage"],
            r["arm"],
            r["heldout_set"],
            r["metric"],
            str(r["n_pairs"]),
            f"{r['run_value']:.3f}",
            f"{r['against_value']:.3f}",
            diff,
            ci,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_arms(out: Path, prefix: Path, resamples: int, seed: int) -> list[dict[str, Any]]:
    """The folder, replaced as a whole (nothing written when no team report is in)."""
    started = time.time()
    rows, missing = arm_rows(prefix, resamples, seed)
    params = {"prefix": str(prefix), "resamples": resamples, "seed": seed}
    command = ["python -m orchestry.eval.arms", str(prefix), "--out", str(out)]
    write_folder(
        out,
        "arms",
        csv_text(COLUMNS, rows),
        arms_markdown(rows, missing, prefix),
        "orchestry.eval.arms",
        params,
        command,
        started,
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.eval.arms", description=__doc__.splitlines()[0]
    )
    parser.add_argument("prefix", type=Path, help="the reports' prefix, e.g. reports/gpu_sft")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        rows = write_arms(args.out, args.prefix, args.resamples, args.seed)
    except AblationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    means = sum(r["row"] == "mean" for r in rows)
    print(f"{means} comparisons -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
