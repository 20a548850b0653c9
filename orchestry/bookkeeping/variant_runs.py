"""`python -m orchestry.bookkeeping.variant_runs`: the runs beside the default one, as DVC stages.

optional/runs/dvc.yaml runs them (`dvc repro optional/runs/dvc.yaml`, or one of them by name):
- `seed N`: the team trained with `seed: N`; its history and metrics go to reports/seed_runs/seedN.*;
- `lever NAME KEY=VALUE ...`: the team trained with those keys over params.yaml, then evaluated on the
  test split; its history, train and test metrics go to reports/ablations/NAME/;
- `report`: reports/seed_runs/ (the training curves of every run as a band, the first vs last quarter
  of each) and reports/ablations.md (one row a lever against the default run), each folder's manifest.

A run works in cache/variants/<name>/: params.yaml is the project's with the keys over it, and links
reach the project's prepared splits, smoke check, warm start and converted model (what `train` and
`evaluate` read besides their own outputs). The stages run there as `python -m orchestry <stage>`, so
each checks its own fingerprint as in the pipeline. Their DVC code dependency is the project's
results/fingerprints/<stage>.txt: a key that would make a stage run other code (a plug-in another
setting selects) is refused before anything runs, naming the key. Outputs are moved into place only
when the whole run has finished.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from orchestry import io, paths
from orchestry.bookkeeping import code_deps
from orchestry.bookkeeping.provenance import MANIFEST, fingerprint_path
from orchestry.params import Params, ParamsError, parse_params

ROOT = code_deps.ROOT
WORK = Path("cache/variants")  # one work folder a run, beside the checkpoints (git-ignored)
# what `train` and `evaluate` read that no variant writes itself: linked from the project
SHARED = (paths.PREPARED, paths.SMOKE.parent, paths.SFT)
SEED_RESULTS = (".csv", paths.HISTORY), (".metrics.json", paths.TRAIN_METRICS)
# reports/ablations/<name>/: what `figures`' ablations table reads, and the file it comes from
LEVER_RESULTS = {
    "history.csv": paths.HISTORY,
    "train.json": paths.TRAIN_METRICS,
    "evaluate.json": paths.metrics("magrpo"),
}


class VariantFailed(RuntimeError):
    """A run's stage failed, or its keys would change the code the stage runs."""


def overrides(pairs: list[str]) -> dict[str, Any]:
    """`a.b=value` pairs as a nested mapping; each value is read as YAML (`0.5`, `true`, `easy_first`)."""
    over: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ParamsError(f"{pair!r}: an override is KEY=VALUE, e.g. train.credit_weight=0.5")
        *sections, last = key.split(".")
        node = over
        for section in sections:
            node = node.setdefault(section, {})
        node[last] = yaml.safe_load(value)
    return over


def over_params(raw: dict[str, Any], over: dict[str, Any], where: str = "") -> dict[str, Any]:
    """`raw` with `over` on top; a key params.yaml does not have is refused, naming it."""
    out = dict(raw)
    for key, value in over.items():
        name = f"{where}{key}"
        if key not in raw:
            raise ParamsError(f"{name}: no such key in params.yaml")
        if isinstance(value, dict) and isinstance(raw[key], dict):
            out[key] = over_params(raw[key], value, f"{name}.")
        else:
            out[key] = value
    return out


def variant_params(pairs: list[str], params_yaml: Path = Path("params.yaml")) -> dict[str, Any]:
    """params.yaml with the pairs over it, validated (ParamsError names a bad key or value)."""
    raw = yaml.safe_load(params_yaml.read_text()) or {}
    merged = over_params(raw, overrides(pairs))
    parse_params(merged, f"{params_yaml} + {' '.join(pairs)}")
    return merged


def same_code(stages: tuple[str, ...], params: Params, pairs: list[str]) -> None:
    """VariantFailed unless each stage runs, under these params, the code of its project fingerprint
    (the run's DVC dependency)."""
    from orchestry.bookkeeping.fingerprint import fingerprint  # the closure: only when checked

    for stage in stages:
        if fingerprint(stage, params) != fingerprint_path(stage).read_text():
            raise VariantFailed(
                f"{' '.join(pairs)}: stage {stage} would run other code than "
                f"{fingerprint_path(stage)} holds (a key selects another plug-in); a lever here "
                "may change settings, not the code a stage runs"
            )


def prepare_work(work: Path, raw: dict[str, Any]) -> None:
    """A fresh work folder: the run's params.yaml and links to what the stages read."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    links = list(SHARED)
    cache = Path(raw["model"]["cache_dir"])
    if not cache.is_absolute():  # the converted model is shared with the project's stages
        cache.mkdir(parents=True, exist_ok=True)
        links.append(cache)
    for rel in links:
        if not rel.exists():
            raise FileNotFoundError(f"{rel} is missing: run `dvc repro` first (the runs read it)")
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).symlink_to(rel.resolve(), target_is_directory=True)
    io.write_text(work / "params.yaml", yaml.safe_dump(raw, sort_keys=False))


def run_stage(work: Path, stage: str) -> None:
    """`python -m orchestry <stage>` in the work folder, its log there; VariantFailed names it."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    log = Path("logs") / f"{stage}.log"
    argv = [sys.executable, "-m", "orchestry", "--log", str(log), stage]
    print(f"[{work.name}] {stage}", file=sys.stderr, flush=True)
    if subprocess.run(argv, cwd=work, env=env, check=False).returncode != 0:
        raise VariantFailed(f"{work.name}: stage {stage} failed (log: {work / log})")


def run_variant(name: str, pairs: list[str], stages: tuple[str, ...]) -> Path:
    """Run `stages` under params.yaml + `pairs` in cache/variants/<name>/; returns the folder."""
    raw = variant_params(pairs)
    same_code(stages, parse_params(raw), pairs)
    work = WORK / name
    prepare_work(work, raw)
    for stage in stages:
        run_stage(work, stage)
    return work


def keep(files: dict[Path, Path]) -> None:
    """Copy each run output (value) to its report path (key), all or none: each is written
    beside its target first, then moved in place."""
    for source in files.values():
        if not source.is_file():
            raise VariantFailed(f"{source} is missing: its stage wrote no such file")
    staged = []
    for target, source in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(source, tmp)
        staged.append((tmp, target))
    for tmp, target in staged:
        tmp.replace(target)


def seed_run(seed: int) -> None:
    """The team trained with another seed: reports/seed_runs/seed<N>.csv and .metrics.json."""
    work = run_variant(f"seed{seed}", [f"seed={seed}"], ("train",))
    keep({paths.SEED_RUNS / f"seed{seed}{suffix}": work / src for suffix, src in SEED_RESULTS})


def lever_run(name: str, pairs: list[str]) -> None:
    """The team trained and evaluated with `pairs` over params.yaml: reports/ablations/<name>/."""
    work = run_variant(name, pairs, ("train", "evaluate"))
    folder = paths.ABLATIONS / name
    files = {folder / f: work / src for f, src in LEVER_RESULTS.items()}
    keep(files)
    io.write_text(folder / "params.txt", " ".join(pairs) + "\n")


def ablation_runs() -> dict[str, dict[str, Any]]:
    """The lever runs: reports/ablations/<name>/{params.txt,train.json,evaluate.json}."""
    runs = {}
    for folder in sorted(p for p in paths.ABLATIONS.glob("*") if p.is_dir()):
        runs[folder.name] = {
            "params": (folder / "params.txt").read_text().strip(),
            "train": json.loads((folder / "train.json").read_text()),
            "evaluate": json.loads((folder / "evaluate.json").read_text()),
        }
    return runs


def seed_histories() -> dict[str, Any]:
    """The default run's history, then each seed run's (reports/seed_runs/seed*.csv)."""
    import pandas as pd

    runs = {"this run": pd.read_csv(paths.HISTORY)}
    runs |= {p.stem: pd.read_csv(p) for p in sorted(paths.SEED_RUNS.glob("seed*.csv"))}
    return runs


def report(params: Params) -> None:
    """reports/seed_runs/{training_curves.png,pdf, runs.md}, reports/ablations.md and the two
    folders' manifests (code hash and params: the same for the same code and params)."""
    from orchestry.bookkeeping.recovered import made_now
    from orchestry.eval.tables import ablations_markdown, runs_markdown
    from orchestry.eval.text_tables import text_ablations_note
    from orchestry.stages import figures

    figures._style()
    runs = seed_histories()
    figures.plot_training(list(runs.values()), params.figures.smoothing, folder=paths.SEED_RUNS)
    io.write_text(
        paths.SEED_RUNS / "runs.md",
        "# Training runs: the default seed and the others\n\nGenerated by `dvc repro "
        "optional/runs/dvc.yaml` (orchestry/bookkeeping/variant_runs.py); do not edit. First vs "
        "last quarter of the steps, per run; training_curves.png draws them (mean and range).\n\n"
        + runs_markdown(runs),
    )
    default_eval = json.loads(paths.metrics("magrpo").read_text())
    default_train = json.loads(paths.TRAIN_METRICS.read_text())
    if "pass@1" in default_eval:
        table = ablations_markdown(default_eval, default_train, ablation_runs())
    else:  # a text environment: the levers are code-task runs
        table = text_ablations_note()
    io.write_text(paths.ABLATIONS_MD, table)
    for folder in (paths.SEED_RUNS, paths.ABLATIONS):
        io.write_json(folder / MANIFEST, made_now(folder))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.bookkeeping.variant_runs", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    seed = sub.add_parser("seed", help="train the team with another seed")
    seed.add_argument("seed", type=int)
    lever = sub.add_parser("lever", help="train and evaluate the team with keys changed")
    lever.add_argument("name", help="the lever's name: its folder under reports/ablations/")
    lever.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    sub.add_parser("report", help="reports/seed_runs/ and reports/ablations.md from the runs")
    args = parser.parse_args(argv)
    try:
        if args.command == "seed":
            seed_run(args.seed)
        elif args.command == "lever":
            lever_run(args.name, args.pairs)
        else:
            from orchestry.params import load_params

            report(load_params())
    except (ParamsError, VariantFailed, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2 if isinstance(err, ParamsError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
