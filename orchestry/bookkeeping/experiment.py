"""`python -m orchestry.bookkeeping.experiment CONFIG...`: the whole pipeline on other params, reported apart.

An experiment is params.yaml with one or more YAML files' keys over it (the GPU run:
`workflow/experiments/gpu.yaml`). It runs every stage of dvc.yaml, in dvc.yaml's order and with
dvc.yaml's commands, in its own work folder `build/experiments/<name>/` (so the committed pipeline's
results/ and reports/ stay as they are), then copies the figures stage's outputs with the exact params,
the hardware and the wall time into `reports/<name>/`.

Run it again after an interruption (a machine given back, a crash) and it goes on where it stopped:
a stage whose stamp matches (its command, the params it reads, its fingerprint and the stamps of
what it reads) is skipped, and the train stage resumes from its last checkpoint under `build/experiments/<name>/cache/checkpoints`.
To go on on another machine, bring that folder along. `--only` runs some stages alone (the
methods for frozen teams need no training); the report then holds each method's metrics. The
opt-in stages of optional/dvc.yaml (orchestrate) run only when `--only` names them. Nothing is
written to `reports/<name>/` until every stage has run; a bad key in a config exits 2 naming it, before anything runs.
An existing `reports/<name>/` is another run's record: the runner stops before any stage unless
`--replace` says to replace it (or `--name` gives a new folder).

This module is not imported by any stage (it runs them), so changing it reruns none.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from orchestry import io, paths
from orchestry.bookkeeping import code_deps, plugins
from orchestry.bookkeeping.provenance import code_hash, git_state, hardware, manifest
from orchestry.bookkeeping.stage_runs import (
    GPU_PEAKS,
    STATE,
    ExperimentFailed,
    pipeline_commands,
    run_stages,
)
from orchestry.eval.paired import (
    paired_csv,
    paired_markdown,
    paired_rows,
    per_problem_csv,
    per_problem_rows,
)
from orchestry.params import Params, ParamsError, parse_params

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path("build/experiments")
# what reports/<name>/ receives from the work folder, as (source, name there)
REPORTED = [
    (paths.FIGURES, "figures"),
    (paths.RESULTS_MD, "results.md"),
    (paths.COMPARISON_CSV, "comparison.csv"),
    (paths.PAIRED_CSV, "paired.csv"),
    (paths.TRAIN_METRICS, "train_metrics.json"),
    (paths.HISTORY, "history.csv"),
    (paths.SINGLE_METRICS, "train_single_metrics.json"),
    (paths.SINGLE_HISTORY, "train_single_history.csv"),
    (paths.SFT_METRICS, "sft_metrics.json"),
    (paths.SFT_HISTORY, "sft_history.csv"),
    (paths.SCHEMES / "summary.json", "schemes.json"),
    (paths.PREPARED_SUMMARY, "split.json"),
    (paths.PROMPT_POLICY, "prompt_policy"),
    (paths.BEAM_COST, "beam_cost.json"),
    (paths.ORCHESTRATE_REPORTS, "orchestrate"),
    (paths.ORCHESTRATE_METRICS, "orchestrate_metrics.json"),
    (paths.ORCHESTRATE_HISTORY, "orchestrate_history.csv"),
    # a report is one run's record: its timings (tokens/s, seconds; out of the pipeline's outputs)
    # come along, as its hardware and wall time do
    (paths.TIMINGS, "timings"),
]


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s keys on top; mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def resolve(configs: list[Path], params_yaml: Path) -> Params:
    """params.yaml with each config's keys over it, validated (ParamsError names a bad key or file)."""
    raw = yaml.safe_load(params_yaml.read_text()) or {}
    for config in configs:
        if not config.is_file():
            raise ParamsError(f"{config}: no such config file")
        over = yaml.safe_load(config.read_text()) or {}
        if not isinstance(over, dict):
            raise ParamsError(f"{config}: must be a mapping of params keys")
        raw = merged(raw, over)
    return parse_params(raw, " + ".join([str(params_yaml), *map(str, configs)]))


def prepare_workdir(
    work: Path,
    params: Params,
    configs: list[Path],
    problems: Path | None = None,
    trained: Path | None = None,
) -> str:
    """The work folder: the experiment's params file, links to the task sets (`problems` in place
    of data/coop) and to the model cache, and with `trained` a finished run's train outputs (and
    train_single's, where it has them). Returns where those inputs come from, in words, for the
    stamps."""
    if problems is not None and not problems.is_dir():
        raise FileNotFoundError(f"{problems}: no such folder of problems (--problems)")
    if trained is not None and not (trained / paths.ADAPTERS).is_dir():
        raise FileNotFoundError(
            f"{trained / paths.ADAPTERS} is missing: --trained takes a finished experiment's work folder"
        )
    work.mkdir(parents=True, exist_ok=True)
    names = ", ".join(str(c) for c in configs)
    body = yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False)
    header = f"# params.yaml with the keys of {names} over it (python -m orchestry.bookkeeping.experiment)"
    io.write_text(work / "params.yaml", f"{header}\n{body}")
    sets = (*paths.PROBLEM_DIRS.values(), paths.STORY_DATA, paths.WRITING_DATA)
    targets = {rel: ROOT / rel for rel in sets}
    if problems is not None:
        targets[paths.PROBLEM_DIRS["coop"]] = problems.resolve()
    cache = Path(params.model.cache_dir)
    if not cache.is_absolute():  # the converted model is shared with the checkout's runs
        (ROOT / cache).mkdir(parents=True, exist_ok=True)
        targets[cache] = ROOT / cache
    for rel, target in targets.items():
        link = work / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.resolve() != target:
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
    origin = [f"{rel}: {target}" for rel, target in targets.items() if rel != cache]
    if trained is not None:
        shutil.rmtree(work / paths.TRAIN, ignore_errors=True)
        shutil.copytree(trained / paths.TRAIN, work / paths.TRAIN)
        adapters = trained / paths.ADAPTERS
        origin.append(f"trained: {adapters.resolve()} {adapters.stat().st_mtime}")
        if trained_single(trained):
            shutil.rmtree(work / paths.TRAIN_SINGLE, ignore_errors=True)
            shutil.copytree(trained / paths.TRAIN_SINGLE, work / paths.TRAIN_SINGLE)
            single = trained / paths.SINGLE_ADAPTERS
            origin.append(f"trained single: {single.resolve()} {single.stat().st_mtime}")
    return "\n".join(origin)


def trained_single(trained: Path | None) -> bool:
    """Whether a finished experiment's work folder holds a trained single agent too."""
    return trained is not None and (trained / paths.SINGLE_ADAPTERS).is_dir()


def methods_table(methods: list[Path]) -> str:
    """methods.md for a report without results.md (a run with `--only`): each method's return,
    pass@1 and test pass rates (plain and robust, n/a for a run before the robust one) where its
    environment has tests, with their 95% CIs, and the tokens generated per answer, read from
    its metrics file."""

    def cell(m: dict[str, Any], key: str, ci: str) -> str:
        if m.get(key) is None:
            return "n/a"
        low, high = m.get(ci) or (m[key], m[key])
        return f"{m[key]:.3f} [{low:.3f}, {high:.3f}]"

    lines = [
        "# Methods on the test split",
        "",
        "Written by `python -m orchestry.bookkeeping.experiment` from methods/*.json (95% bootstrap CIs over "
        "tasks); do not edit.",
        "",
        "| Method | Return | pass@1 | Test pass rate | Robust test pass rate | Tokens/answer |",
        "|---|---|---|---|---|---|",
    ]
    for path in methods:
        m = json.loads(path.read_text())
        cells = [
            cell(m, "return_mean", "return_ci95"),
            cell(m, "pass@1", "pass@1_ci95"),
            cell(m, "test_pass_rate", "test_pass_rate_ci95"),
            cell(m, "robust_test_pass_rate", "robust_test_pass_rate_ci95"),
            f"{m['new_tokens_mean']:.0f}",
        ]
        lines.append(f"| {path.stem} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def experiment_code() -> list[str]:
    """The code an experiment runs: every stage's import closure with every plug-in params may
    select, and the runner itself."""
    chosen = plugins.every_plugin()
    files = {f for stage in code_deps.STAGES for f in code_deps.stage_code(stage, chosen)}
    return sorted(
        files | {"orchestry/bookkeeping/experiment.py", "orchestry/bookkeeping/stage_runs.py"}
    )


def report(
    work: Path,
    out: Path,
    configs: list[Path],
    times: dict[str, float],
    started: float,
    command: str = "",
) -> None:
    """reports/<name>/: the figures stage's outputs and the run's record, replaced as a whole."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for src, name in REPORTED:
        if (work / src).is_dir():
            shutil.copytree(work / src, partial / name)
        elif (work / src).exists():
            shutil.copy2(work / src, partial / name)
    shutil.copy2(work / "params.yaml", partial / "params.yaml")
    for config in configs:
        shutil.copy2(config, partial / f"config-{config.name}")
    wall: dict[str, Any] = {
        "stages_s": {k: round(v, 1) for k, v in times.items()},
        "total_s": round(sum(times.values()), 1),
    }
    if started:  # from the run's start to its report, stages run at once counted once
        wall["wall_s"] = round(time.time() - started, 1)
    peaks_file = work / STATE / GPU_PEAKS
    if peaks_file.is_file():
        wall["gpu_peak_mib"] = json.loads(peaks_file.read_text())
    found = {d.name: d / "metrics.json" for d in (work / paths.BASELINES).glob("*")}
    found["magrpo"] = work / paths.metrics("magrpo")
    methods = {name: f for name, f in sorted(found.items()) if f.is_file()}
    for name, metrics in methods.items():
        (partial / "methods").mkdir(exist_ok=True)
        shutil.copy2(metrics, partial / "methods" / f"{name}.json")
    params = yaml.safe_load((work / "params.yaml").read_text())
    answered = answers(work, [*methods, "single_grpo"])
    if answered:
        io.write_text(partial / "per_problem.csv", per_problem_csv(per_problem_rows(answered)))
    if methods and not (partial / "results.md").exists():
        table = methods_table(sorted(partial.glob("methods/*.json")))
        paired = partial_paired(work, list(methods), params)
        if paired:
            io.write_text(partial / "paired.csv", paired_csv(paired))
            table += "\n" + paired_markdown(paired, {m: m for m in methods})
        io.write_text(partial / "methods.md", table)
    io.write_json(partial / "wall_time.json", wall)
    run_record = work / STATE / "manifest.json"  # the run's, kept when only the report is made
    if started or not run_record.exists():
        machine = hardware()
        wall_s = time.time() - started if started else sum(times.values())
        record = manifest(ROOT, experiment_code(), params, machine, started, wall_s)
        if command:  # the command line that ran it (`--only` and all)
            record["command"] = command
        io.write_json(run_record, record)
    record = json.loads(run_record.read_text())
    io.write_json(partial / "hardware.json", record["hardware"])
    if not started:  # this report was made apart from the run: say by which code
        record["reported"] = {k: v for k, v in git_state_of_runner().items()}
    io.write_json(partial / "manifest.json", record)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)


def answers(work: Path, methods: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Method -> its held-out generations rows, for each of `methods` the run has answered."""
    files = {m: work / paths.generations(m) for m in dict.fromkeys(methods)}
    return {m: io.read_jsonl(f) for m, f in files.items() if f.is_file()}


def partial_paired(work: Path, methods: list[str], params: dict[str, Any]) -> list[dict[str, Any]]:
    """The team against each method the run holds (no figures stage ran): paired differences from
    their generations, as the figures stage makes them; none without the team's rows."""
    rows = answers(work, methods)
    if "magrpo" not in rows or len(rows) < 2:
        return []
    return paired_rows(rows, params["evaluate"]["bootstrap"], params["seed"])


def git_state_of_runner() -> dict[str, Any]:
    """The commit (and dirty flag) of the code making a report apart from its run."""
    commit, dirty = git_state(ROOT, experiment_code())
    return {"commit": commit, "dirty": dirty, "code_sha256": code_hash(ROOT, experiment_code())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.bookkeeping.experiment", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "configs", nargs="+", type=Path, help="YAML files of params keys, applied in order"
    )
    parser.add_argument(
        "--name", help="the experiment's name (default: the last config's file stem)"
    )
    parser.add_argument("--out", type=Path, help="where its report goes (default: reports/<name>)")
    parser.add_argument(
        "--problems", type=Path, help="a folder of two-role problems to use in place of data/coop"
    )
    parser.add_argument(
        "--trained",
        type=Path,
        help="a finished experiment's work folder (build/experiments/<name>): its trained team "
        "(and single agent, where it has one) is evaluated, the smoke and train stages (and "
        "train_single) are not run",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated stages to run (e.g. prepare,baseline@naive_concat,beam), the others "
        "not; the report then holds what they wrote (methods/<method>.json). The opt-in stages "
        "of optional/dvc.yaml (orchestrate) run only when named here",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="stages run at once where none reads another's outputs (default 1; on a GPU, "
        "train, train_single and the baselines can share the card)",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="replace reports/<name>/ (or --out) when it exists; without it an existing report "
        "stops the run before any stage, naming the folder",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run no stage: make reports/<name>/ from the work folder (e.g. one brought back "
        "from a GPU machine; with --replace over an existing one); its manifest stays the run's, "
        "with the reporting commit beside it",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print(f"error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    only = tuple(s for s in args.only.split(",") if s)
    unknown = set(only) - {n for n, _ in pipeline_commands()}
    if unknown:
        print(f"error: --only: no such stage {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    name = args.name or args.configs[-1].stem
    work, out = ROOT / BUILD / name, args.out or ROOT / paths.REPORTS / name

    def log(message: str) -> None:
        print(f"[experiment {name}] {message}", file=sys.stderr, flush=True)

    try:
        params = resolve(args.configs, ROOT / "params.yaml")
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if out.exists() and not args.replace:
        print(
            f"error: {out} exists: its manifest records an earlier run; give another --name "
            "(a new folder) or --replace to replace it",
            file=sys.stderr,
        )
        return 2
    started = time.time()
    try:
        if args.report_only:
            times_file = work / STATE / "times.json"
            if not times_file.is_file():
                raise FileNotFoundError(f"{work}: no run to report ({times_file} is missing)")
            times, started = json.loads(times_file.read_text()), 0.0
        else:
            origin = prepare_workdir(work, params, args.configs, args.problems, args.trained)
            skip = ("smoke", "train") if args.trained else ()
            skip += ("train_single",) if trained_single(args.trained) else ()
            times = run_stages(work, origin, log, skip, only, args.jobs)
    except (ExperimentFailed, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m orchestry.bookkeeping.experiment", *given]) if started else ""
    report(work, out, args.configs, times, started, command)
    log(f"done in {sum(times.values()):.0f} s of stages; report in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
