"""Manifests recovered from git history, for results made before manifests existed.

A folder of reports/ or a record of results/bench/ that has no manifest gets one rebuilt from what git
and the folder still hold: the last commit that changed it (and its date), the hash of the producing
code's import closure *at that commit* (the closure is read with today's rules from that commit's files;
null where today's rules cannot read that tree), the params from its params.yaml, its config files, the
hardware and wall time it recorded, marked `"recovered": "from git history"`. Whether a result is
current (its code hash equals today's) is not stored: reports/README.md says it from today's code.
`python -m orchestry.bookkeeping.recovered` writes the missing ones (never over an existing manifest);
`made_now` (or `--made-now FOLDER`) gives a pipeline folder's manifest from the working tree instead (the
runs' report, orchestry/bookkeeping/variant_runs.py, writes reports/seed_runs' and reports/ablations' so).
No stage imports this module.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import io as stdio
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from orchestry import paths
from orchestry.bookkeeping import code_deps, plugins
from orchestry.bookkeeping.provenance import (
    BENCH,
    MANIFEST,
    bench_manifest_path,
    code_hash,
)

ROOT = code_deps.ROOT
RECOVERED = "from git history"
HEADER = "# params.yaml with the keys of "  # the runner's params.yaml starts so
# Folders of reports/ the DVC pipeline writes, and the stages whose code made them (and the command).
PIPELINE_FOLDERS: dict[str, tuple[tuple[str, ...], str]] = {
    "figures": (("figures",), "dvc repro figures"),
    "orchestrate": (("orchestrate",), "dvc repro optional/dvc.yaml"),
    "seed_runs": (("train", "figures"), "dvc repro optional/runs/dvc.yaml"),
    "ablations": (("train", "evaluate", "figures"), "dvc repro optional/runs/dvc.yaml"),
}
RUNS_CODE = "orchestry/bookkeeping/variant_runs.py"  # what runs them (beside the stages' code)


def git(*args: str, root: Path = ROOT) -> str:
    """A git command's stdout; a failure raises naming the command."""
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def last_change(rel: str, root: Path = ROOT) -> tuple[str, str]:
    """(commit, ISO date) of the last commit that changed `rel` (a file, or any file of a folder):
    the commit whose code made what the folder holds now."""
    # the folder's own manifest is not what it holds: a commit adding only that is passed over
    log = git("log", "-1", "--format=%H %aI", "--", rel, f":(exclude){rel}/{MANIFEST}", root=root)
    if not log:
        raise RuntimeError(f"{rel}: git history has no commit holding it (is it committed?)")
    commit, date = log.split(" ", 1)
    return commit, date


def tree_at(commit: str, into: Path, root: Path = ROOT) -> Path:
    """The package and benchmarks of `commit`, extracted into `into`."""
    data = subprocess.run(
        ["git", "archive", commit, "orchestry", "benchmarks"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=stdio.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def rules_over(tree: Path) -> ModuleType:
    """Today's code_deps, reading the files of `tree` (its ROOT is where the file lies)."""
    target = tree / "orchestry" / "bookkeeping" / "_code_deps_today.py"  # its ROOT: parents[2]
    target.parent.mkdir(exist_ok=True)
    target.write_text(Path(code_deps.__file__).read_text())
    spec = importlib.util.spec_from_file_location(f"code_deps_at_{id(tree)}", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Folders written by a comparison tool over other reports: the file that marks one -> its module.
TOOLS = {
    "ablation.csv": "orchestry.eval.ablation",
    "seeds.csv": "orchestry.eval.seeds",
    "arms.csv": "orchestry.eval.arms",
}


def tool_code(module: str) -> list[str]:
    """What `python -m MODULE` (a comparison tool of TOOLS) runs: its import closure."""
    modules = code_deps.import_closure(module)
    files = {code_deps.module_file(m) for m in modules} - {None}
    return sorted(str(f.relative_to(code_deps.ROOT)) for f in files)


def ablation_code() -> list[str]:
    """What `python -m orchestry.eval.ablation` runs (a folder with ablation.csv is its output)."""
    return tool_code(TOOLS["ablation.csv"])


def producing_code(rules: ModuleType, kind: str, name: str) -> list[str]:
    """The files that made a result of `kind` ("experiment", "pipeline" or "bench") called `name`,
    by `rules` (a code_deps over some tree); ValueError where that tree lacks what the rules need."""
    for marker, module in TOOLS.items():
        if kind == marker.removesuffix(".csv"):
            return tool_code(module)
    root: Path = rules.ROOT
    if kind == "bench":
        return rules.script_code(root / "benchmarks" / f"{bench_script(name)}.py")
    if kind == "pipeline":
        stages = PIPELINE_FOLDERS[name][0]
    else:
        stages = tuple(s for s in rules.STAGES if (root / "orchestry/stages" / f"{s}.py").is_file())
    # today's tree: with every plug-in params may select (an older tree imported them plainly)
    chosen = plugins.every_plugin() if rules is code_deps else []
    files = {f for stage in stages for f in rules.stage_code(stage, chosen)}
    if kind == "pipeline" and name in ("seed_runs", "ablations") and (root / RUNS_CODE).is_file():
        files.add(RUNS_CODE)
    if kind == "experiment":
        files |= {
            f
            for f in (
                "orchestry/bookkeeping/experiment.py",
                "orchestry/bookkeeping/stage_runs.py",
                "orchestry/experiment.py",  # where they stood before bookkeeping/
                "orchestry/stage_runs.py",
            )
            if (root / f).is_file()
        }
    return sorted(files)


# Records whose name does not start with their script's (benchmarks/README.md gives the commands).
BENCH_SCRIPTS = {"policy_cpu": "policy_throughput", "policy_cuda": "policy_throughput"}


def bench_script(record: str) -> str:
    """The benchmark script (a stem under benchmarks/) that writes results/bench/<record>.json: the
    longest script name the record's name starts with (gpu_step_ahead: gpu_step)."""
    if record in BENCH_SCRIPTS:
        return BENCH_SCRIPTS[record]
    scripts = sorted((p.stem for p in (ROOT / "benchmarks").glob("*.py")), key=len, reverse=True)
    return next((s for s in scripts if record == s or record.startswith(s + "_")), record)


def hash_of(tree: Path, kind: str, name: str) -> tuple[str | None, int | None, str | None]:
    """(code hash, file count, why none) of the producing code in `tree`."""
    try:
        files = producing_code(rules_over(tree), kind, name)
    except (ValueError, FileNotFoundError, SyntaxError) as err:
        why = str(err).replace(str(tree) + "/", "")
        return None, None, f"today's import rules cannot read that commit's code: {why}"
    return code_hash(tree, files), len(files), None


@functools.cache
def today_hash(kind: str, name: str) -> str | None:
    """The producing code's hash in the working tree now (every experiment has the same code)."""
    if kind == "experiment" and name:
        return today_hash(kind, "")
    try:
        return code_hash(ROOT, producing_code(code_deps, kind, name))
    except (ValueError, FileNotFoundError):
        return None


def kind_of(folder: Path) -> str:
    for marker in TOOLS:
        if (folder / marker).is_file():
            return marker.removesuffix(".csv")
    return "pipeline" if folder.name in PIPELINE_FOLDERS else "experiment"


def configs_in_order(folder: Path) -> list[str]:
    """The config files a runner's folder was made from, in the order they were applied (its
    params.yaml's header names them), else in name order from its config-*.yaml copies."""
    params = folder / "params.yaml"
    header = params.read_text().splitlines()[0] if params.is_file() else ""
    if header.startswith(HEADER) and header.endswith(
        " over it (python -m orchestry.bookkeeping.experiment)"
    ):
        named = header.removeprefix(HEADER).split(" over it")[0]
        return [name.strip() for name in named.split(",")]
    return [
        f"workflow/experiments/{c.name.removeprefix('config-')}"
        for c in sorted(folder.glob("config-*.yaml"))
    ]


def experiment_command(folder: Path) -> str:
    """The runner's command that makes a folder, from the config files it was made from."""
    names = " ".join(configs_in_order(folder))
    return f"python -m orchestry.bookkeeping.experiment {names} --name {folder.name}"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def recover(rel: str, kind: str, name: str, root: Path = ROOT) -> dict[str, Any]:
    """The recovered manifest of `rel` (a reports/ folder or a results/bench/ record)."""
    commit, date = last_change(rel, root)
    with tempfile.TemporaryDirectory() as tmp:
        sha, count, why = hash_of(tree_at(commit, Path(tmp), root), kind, name)
    path = root / rel
    out: dict[str, Any] = {
        "recovered": RECOVERED,
        "commit": commit,
        "dirty": None,
        "code_sha256": sha,
        "code_files": count,
        "date": date,
    }
    if why:
        out["code_sha256_missing"] = why
    if kind == "bench":
        out["command"] = (
            f"python benchmarks/{bench_script(name)}.py (its arguments are in benchmarks/README.md)"
        )
        return out
    if kind == "pipeline":
        out["command"] = PIPELINE_FOLDERS[name][1]
    else:
        out["command"] = experiment_command(path)
        out["configs"] = [c.name for c in sorted(path.glob("config-*.yaml"))]
    if (path / "params.yaml").is_file():
        out["params"] = yaml.safe_load((path / "params.yaml").read_text())
    for key, file in (("hardware", "hardware.json"), ("wall_time", "wall_time.json")):
        if (path / file).is_file():
            out[key] = read_json(path / file)
    return out


def missing(root: Path = ROOT) -> list[tuple[str, str, str]]:
    """(path, kind, name) of every reports/ folder and results/bench/ record without its manifest."""
    found = [
        (str(d.relative_to(root)), kind_of(d), d.name)
        for d in sorted((root / paths.REPORTS).iterdir())
        if d.is_dir() and not (d / MANIFEST).is_file()
    ]
    for record in sorted((root / BENCH).glob("*.json")):
        if not record.name.endswith(".manifest.json") and not bench_manifest_path(record).is_file():
            found.append((str(record.relative_to(root)), "bench", record.stem))
    return found


def write_missing(root: Path = ROOT) -> list[Path]:
    """Recover and write the manifest of everything lacking one; returns what it wrote."""
    written = []
    for rel, kind, name in missing(root):
        record = recover(rel, kind, name, root)
        path = bench_manifest_path(root / rel) if kind == "bench" else root / rel / MANIFEST
        path.write_text(json.dumps(record, indent=2) + "\n")
        written.append(path)
    return written


def made_now(folder: Path, root: Path = ROOT) -> dict[str, Any]:
    """The manifest of a pipeline folder just made by the working tree's code (the runs' report
    writes reports/seed_runs' and reports/ablations' so): the code hash, params.yaml and the command, the same for the
    same code and params (like a stage's: its commit is the git commit holding it, which
    reports/README.md reads from git)."""
    if folder.name not in PIPELINE_FOLDERS:
        raise ValueError(f"{folder}: not one of {', '.join(PIPELINE_FOLDERS)}")
    files = producing_code(code_deps, "pipeline", folder.name)
    return {
        "code_sha256": code_hash(root, files),
        "code_files": len(files),
        "params": yaml.safe_load((root / "params.yaml").read_text()),
        "command": PIPELINE_FOLDERS[folder.name][1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.bookkeeping.recovered", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--made-now",
        type=Path,
        help="write this pipeline folder's manifest from the working tree instead (e.g. "
        "reports/seed_runs, as `dvc repro optional/runs/dvc.yaml` does), replacing the old one",
    )
    args = parser.parse_args(argv)
    if args.made_now is not None:
        try:
            record = made_now(args.made_now)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        (ROOT / args.made_now / MANIFEST).write_text(json.dumps(record, indent=2) + "\n")
        return 0
    try:
        for path in write_missing():
            print(path.relative_to(ROOT))
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
