"""The trusted checker against the previous in-process harness: same outcomes, and how fast.

The previous sandbox package (tests run in the program's own interpreter) is read out of git at
`--legacy-rev` into a temporary package, so both implementations run in this one script on this
machine:

- **equivalence**: every program this repository has stored (the committed rollouts and every
  method's generations), the reference solution of every HumanEval problem and every problem in
  data/, the derived helper unit tests against the reference helpers, and the recording run that
  derives them: per job, the `passed` tuples of the two must be equal (and their first failures
  are compared too);
- **throughput** of the reward workload: `--programs` joint programs from the committed rollouts
  (those that define main, as `score_joint_actions` runs them) with their problems' tests, and the
  same number of reference programs (every test passes: the most calls through the channel), each
  run with `run_many` on `--workers` workers, alternating old and new for `--repeats` rounds; the
  median wall time of each, and the ratio new / old.

    python benchmarks/reward_sandbox.py --out results/bench/reward_sandbox.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestry import io, paths  # noqa: E402
from orchestry.bookkeeping.provenance import write_bench_manifest  # noqa: E402
from orchestry.envs.code import sandbox  # noqa: E402
from orchestry.envs.code.humaneval import load_humaneval  # noqa: E402
from orchestry.envs.code.problems import Problem, load_problem_dir, read_problems  # noqa: E402
from orchestry.envs.code.role_checks import UNIT_TEST_SETUP  # noqa: E402
from orchestry.envs.code.unit_tests import recording_program  # noqa: E402
from orchestry.params import load_params  # noqa: E402
from orchestry.stages.from_params import sandbox_limits  # noqa: E402

PACKAGE = "orchestry/envs/code/sandbox"

STARTED = time.time()  # the benchmark's wall time runs from here (its manifest)


def cpu_model() -> str:
    """The processor's name from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.machine()


def legacy_sandbox(rev: str, into: Path):
    """The sandbox package as it was at `rev`, importable as `legacy_sandbox`."""
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:{PACKAGE}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    package = into / "legacy_sandbox"
    package.mkdir()
    for name in names:
        text = subprocess.run(
            ["git", "show", f"{rev}:{PACKAGE}/{name}"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        text = text.replace("orchestry.envs.code.sandbox", "legacy_sandbox")
        # Its hidden paths are worked out from its own place in the checkout: point it back there.
        text = text.replace("Path(__file__).resolve().parents[4]", f"Path({str(ROOT)!r})")
        (package / name).write_text(text)
    sys.path.insert(0, str(into))
    return importlib.import_module("legacy_sandbox")


def jobs_of(problem: Problem, program: str) -> sandbox.SandboxJob:
    return sandbox.SandboxJob(program, tuple(problem.tests), problem.setup, problem.main.name)


def stored_programs(problems: dict[str, Problem]) -> list[sandbox.SandboxJob]:
    """Every joint program the repository stores whose main is defined, with its problem's tests."""
    files = [ROOT / paths.ROLLOUTS, *sorted(ROOT.glob("results/**/generations.jsonl"))]
    jobs = []
    for path in files:
        for row in io.read_jsonl(path):
            if row.get("main_defined") and row["problem_id"] in problems:
                jobs.append(jobs_of(problems[row["problem_id"]], row["program"]))
    return jobs


def reference_jobs(problems: list[Problem]) -> list[sandbox.SandboxJob]:
    """Each problem's reference program, its helpers' unit tests, and its recording run."""
    jobs = [jobs_of(p, p.reference_program()) for p in problems]
    for p in problems:
        for h in p.helpers:
            if h.reference and h.unit_tests:
                jobs.append(sandbox.SandboxJob(h.reference + "\n", h.unit_tests, UNIT_TEST_SETUP))
        if all(h.reference for h in p.helpers):
            jobs.append(jobs_of(p, recording_program(p)))
    return jobs


def legacy_job(legacy, job: sandbox.SandboxJob):
    return legacy.SandboxJob(job.program, job.tests, job.setup, job.entry_point)


def timed(run, jobs, workers) -> tuple[float, list]:
    start = time.perf_counter()
    reports = run(jobs, workers)
    return time.perf_counter() - start, reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--legacy-rev", default="9aabcae", help="git revision of the old sandbox")
    parser.add_argument("--programs", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "results" / "bench" / "reward_sandbox.json"
    )
    args = parser.parse_args()

    limits = sandbox_limits(load_params(ROOT / "params.yaml"))
    prepared = read_problems(ROOT / paths.split("train")) + read_problems(
        ROOT / paths.split("test")
    )
    by_id = {p.id: p for p in prepared}
    every = [*load_humaneval(), *load_problem_dir(ROOT / "data" / "coop")]
    every += load_problem_dir(ROOT / "data" / "coop3")
    # Helper unit tests come from the prepared split (derived by the prepare stage).
    every = [by_id.get(p.id, p) for p in every]

    with tempfile.TemporaryDirectory() as tmp:
        legacy = legacy_sandbox(args.legacy_rev, Path(tmp))
        old_limits = legacy.SandboxLimits(
            **{f: getattr(limits, f) for f in limits.__dataclass_fields__}
        )

        def run_old(jobs, workers):
            return legacy.run_many([legacy_job(legacy, j) for j in jobs], old_limits, workers)

        def run_new(jobs, workers):
            return sandbox.run_many(jobs, limits, workers)

        # Equivalence: everything stored, every reference.
        stored, references = stored_programs(by_id), reference_jobs(every)
        corpus = stored + references
        _, old_reports = timed(run_old, corpus, args.workers)
        _, new_reports = timed(run_new, corpus, args.workers)
        differ = [
            {
                "program": j.program[:400],
                "old": o.passed,
                "new": n.passed,
                "old_failure": o.first_failure,
                "new_failure": n.first_failure,
            }
            for j, o, n in zip(corpus, old_reports, new_reports, strict=True)
            if o.passed != n.passed
        ]
        failure_text_differs = sum(
            o.first_failure != n.first_failure
            for o, n in zip(old_reports, new_reports, strict=True)
        )
        reference_failures = [
            j.program[:200]
            for j, r in zip(references, new_reports[len(stored) :], strict=True)
            if not all(r.passed)
        ]

        # Throughput: the reward workload, alternating old and new.
        workloads = {
            "rollouts": [stored[i % len(stored)] for i in range(args.programs)],
            "references": [references[i % len(references)] for i in range(args.programs)],
        }
        timings: dict[str, dict[str, list[float]]] = {}
        for name, jobs in workloads.items():
            timings[name] = {"old": [], "new": []}
            for _ in range(args.repeats):
                for side, run in (("old", run_old), ("new", run_new)):
                    seconds, _ = timed(run, jobs, args.workers)
                    timings[name][side].append(seconds)

    result = {
        "machine": cpu_model(),
        "cpu_count": len(os.sched_getaffinity(0)),
        "legacy_rev": args.legacy_rev,
        "workers": args.workers,
        "equivalence": {
            "jobs": len(corpus),
            "tests": sum(len(j.tests) for j in corpus),
            "passed_tuples_differ": len(differ),
            "first_failure_text_differs": failure_text_differs,
            "differences": differ[:20],
            "reference_jobs": len(references),
            "reference_jobs_not_all_passed": reference_failures,
        },
        "throughput": {
            name: {
                "programs": args.programs,
                "old_s": statistics.median(t["old"]),
                "new_s": statistics.median(t["new"]),
                "ratio_new_over_old": statistics.median(t["new"]) / statistics.median(t["old"]),
                "runs": t,
            }
            for name, t in timings.items()
        },
    }
    io.write_json(args.out, result)
    write_bench_manifest(args.out, __file__, sys.argv, STARTED)
    print(json.dumps({k: v for k, v in result.items() if k != "equivalence"}, indent=2))
    eq = result["equivalence"]
    print(
        f"equivalence: {eq['jobs']} jobs, {eq['tests']} tests; passed tuples differ in "
        f"{eq['passed_tuples_differ']}; first-failure text differs in "
        f"{eq['first_failure_text_differs']}; references not all passed: "
        f"{len(eq['reference_jobs_not_all_passed'])} of {eq['reference_jobs']}"
    )


if __name__ == "__main__":
    main()
