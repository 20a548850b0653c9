"""The manifest a result carries: commit, dirty flag and code hash follow the code that made it."""

import hashlib
import json
import subprocess
from pathlib import Path

from orchestry.bookkeeping import code_deps
from orchestry.bookkeeping.provenance import (
    BENCH,
    code_hash,
    git_state,
    manifest,
    write_bench_manifest,
)


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_the_manifest_names_the_commit_and_sees_a_code_change(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/a.py").write_text("x = 1\n")
    (repo / "notes.md").write_text("prose\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    files = ["pkg/a.py"]
    before = manifest(repo, files, {"seed": 0}, {"cpu_cores": 2}, started=0.0, wall_s=1.04)
    assert before["commit"] == head and before["dirty"] is False
    assert before["started"] == "1970-01-01T00:00:00Z" and before["wall_s"] == 1.0
    assert before["params"] == {"seed": 0} and before["code_files"] == 1

    (repo / "notes.md").write_text("other prose\n")  # not the producing code: still clean
    assert git_state(repo, files) == (head, False)
    (repo / "pkg/a.py").write_text("x = 2\n")
    assert git_state(repo, files) == (head, True)
    assert code_hash(repo, files) != before["code_sha256"]

    monkeypatch.setenv("ORCHESTRY_COMMIT", "abc")  # the launcher's word beats a copy's stale git
    assert git_state(repo, files) == ("abc", None)
    subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)
    monkeypatch.delenv("ORCHESTRY_COMMIT")
    assert git_state(repo, files) == ("unknown", None)


# --- Every result carries its manifest (reports/, results/bench/) --------------------------------

ROOT = Path(__file__).resolve().parents[1]


def test_every_reports_folder_and_bench_record_has_its_manifest():
    """A folder of reports/ without manifest.json, or a results/bench/ record without its
    <name>.manifest.json, fails here: `python -m orchestry.bookkeeping.recovered` rebuilds old ones from git."""
    from orchestry.bookkeeping.recovered import missing

    assert missing(ROOT) == []
    for record in (ROOT / BENCH).glob("*.manifest.json"):
        assert {"commit", "code_sha256"} <= json.loads(record.read_text()).keys(), record


def test_a_folder_without_a_manifest_is_named(tmp_path):
    from orchestry.bookkeeping.recovered import missing

    (tmp_path / "reports" / "fine").mkdir(parents=True)
    (tmp_path / "reports" / "fine" / "manifest.json").write_text("{}")
    (tmp_path / "reports" / "bare").mkdir()
    (tmp_path / "results" / "bench").mkdir(parents=True)
    (tmp_path / "results" / "bench" / "x.json").write_text("{}")
    assert missing(tmp_path) == [
        ("reports/bare", "experiment", "bare"),
        ("results/bench/x.json", "bench", "x"),
    ]


def test_a_stage_folder_is_described_by_its_stage_and_a_run_by_its_command(tmp_path):
    from orchestry.bookkeeping.reports_index import description

    assert description(tmp_path, {"stage": "figures"}) == "the pipeline's `figures` stage"
    assert description(tmp_path, {"command": "make seeds"}) == "made by `make seeds`"


def test_reports_readme_is_generated_from_the_manifests():
    from orchestry.bookkeeping.reports_index import INDEX, index_text

    assert (ROOT / INDEX).read_text() == index_text(ROOT), (
        f"{INDEX} is stale: run `python -m orchestry.bookkeeping.reports_index`"
    )


def test_every_benchmark_writes_its_manifest():
    """Each benchmark script (a file run as a program; timed_train.py is a module they share) calls
    write_bench_manifest after writing its record."""
    scripts = [s for s in sorted((ROOT / "benchmarks").glob("*.py")) if "__main__" in s.read_text()]
    assert len(scripts) >= 9
    for script in scripts:
        assert "write_bench_manifest(" in script.read_text(), script.name


def test_a_benchmark_manifest_names_its_script_and_our_code(tmp_path):
    from orchestry.bookkeeping.code_deps import script_code

    files = script_code(ROOT / "benchmarks" / "multi_gpu.py")
    shared = {"benchmarks/timed_train.py", "benchmarks/vs_comlrl.py"}  # sibling modules it imports
    assert {"benchmarks/multi_gpu.py", *shared} <= set(files)
    assert "orchestry/stages/train.py" in files and "orchestry/bookkeeping/commands.py" not in files
    record = tmp_path / "multi_gpu.json"
    record.write_text("{}")
    path = write_bench_manifest(record, str(ROOT / "benchmarks" / "multi_gpu.py"), ["x"], 0.0)
    made = json.loads(path.read_text())
    assert path.name == "multi_gpu.manifest.json" and made["params"] == {"argv": ["x"]}
    assert made["code_sha256"] == code_hash(ROOT, files) and made["code_files"] == len(files)
    assert made["hardware"]["cpu_cores"] >= 1


def test_a_stage_manifest_is_the_same_for_the_same_code_and_params(tmp_path, monkeypatch):
    """What a stage commits (its fingerprint: each file's code hash, one hash over them; the params)
    repeats byte for byte; what differs between runs (commit at run time, machine, date, wall
    time) goes to logs/<stage>.run.json, out of git."""
    from orchestry.bookkeeping import fingerprint
    from orchestry.bookkeeping.provenance import stage_manifest, write_run_record
    from orchestry.params import load_params

    params = load_params(ROOT / "params.yaml")
    monkeypatch.chdir(tmp_path)
    fingerprint.write_all(params, ["figures"])
    first = stage_manifest("figures", {"seed": 0})
    assert first == stage_manifest("figures", {"seed": 0})
    text = fingerprint.fingerprint("figures", params)
    assert first["code_sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert (
        sorted(first["code"])
        == code_deps.stage_code("figures")
        == sorted(line.split("  ")[1] for line in text.splitlines())
    )
    assert not {"commit", "started", "wall_s", "hardware"} & first.keys()
    path = write_run_record("figures", 0.0, tmp_path)
    assert path == tmp_path / "logs" / "figures.run.json"
    run = json.loads(path.read_text())
    assert (
        run["started"] == "1970-01-01T00:00:00Z" and run["wall_s"] > 0 and len(run["commit"]) == 40
    )
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "logs/figures.run.json"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0  # never committed


def test_the_seed_runs_folder_s_manifest_is_made_from_the_working_tree():
    """The runs' report (optional/runs/dvc.yaml) writes reports/seed_runs' and reports/ablations'
    manifests with `recovered.made_now`."""
    from orchestry.bookkeeping import code_deps
    from orchestry.bookkeeping.recovered import (
        RUNS_CODE,
        made_now,
        main,
        producing_code,
        today_hash,
    )

    record = made_now(ROOT / "reports" / "seed_runs")
    assert record["code_sha256"] == today_hash("pipeline", "seed_runs")
    assert record["command"] == "dvc repro optional/runs/dvc.yaml" and "recovered" not in record
    assert RUNS_CODE in producing_code(code_deps, "pipeline", "ablations")
    assert record["params"]["seed"] == 0
    # the same for the same code and params: no commit, date or machine
    assert not {"commit", "dirty", "started", "hardware"} & record.keys()
    assert made_now(ROOT / "reports" / "seed_runs") == record
    assert main(["--made-now", "reports/gpu"]) == 2  # an experiment's folder: the runner's job


def test_a_bench_record_is_traced_to_the_script_that_writes_it():
    from orchestry.bookkeeping.recovered import bench_script

    assert (
        bench_script("gpu_step_ahead_30b") == "gpu_step"
        and bench_script("multi_gpu") == "multi_gpu"
    )
    assert bench_script("multi_gpu_eval") == "multi_gpu_eval"  # the longest script name wins
    assert bench_script("policy_cuda") == "policy_throughput"
    for record in (ROOT / BENCH).glob("*.manifest.json"):
        command = json.loads(record.read_text()).get("command", "")
        script = command.split()[1] if command.startswith("python benchmarks/") else None
        assert script is None or (ROOT / script).is_file(), record


def test_a_stage_folder_is_current_while_its_fingerprint_is_unchanged(tmp_path):
    """A stage's manifest hashes the fingerprint file it ran with (stage_manifest); the index
    compares it with that file today, so a folder just made by `dvc repro` reads current and reads
    superseded once the stage's code moves (it read superseded always when compared with the
    producing code's file hash)."""
    import hashlib
    import json

    from orchestry.bookkeeping.reports_index import row

    prints = tmp_path / "results" / "fingerprints"
    prints.mkdir(parents=True)
    (prints / "figures.txt").write_text("abc  orchestry/stages/figures.py\n")
    folder = tmp_path / "reports" / "figures"
    folder.mkdir(parents=True)
    made = hashlib.sha256((prints / "figures.txt").read_bytes()).hexdigest()
    record = {"stage": "figures", "code": {"orchestry/stages/figures.py": "abc"}}
    record |= {"code_sha256": made, "commit": "0" * 40, "date": "2026-12-03"}
    (folder / "manifest.json").write_text(json.dumps(record))
    assert row(folder, tmp_path).rstrip(" |").endswith("current")
    (prints / "figures.txt").write_text("abd  orchestry/stages/figures.py\n")
    assert row(folder, tmp_path).rstrip(" |").endswith("superseded")
