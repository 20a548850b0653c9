"""End to end on a real SLURM: the tiny pipeline up to `smoke` through workflow/profiles/slurm.

workflow/scripts/local_slurm.sh starts a one-node cluster (munged, slurmctld, slurmd; a GPU gres backed
by /dev/null, so the profile's `gpu` resources schedule on a machine without one). Snakemake submits
prepare (a CPU job) and smoke (a GPU job: every model stage's rule asks for the same resources) with
snakemake-executor-plugin-slurm; the outputs must equal those of the shared tiny `dvc repro` (conftest.py
`tiny_pipeline`, the same params), and SLURM must have run each job in the partition the profile names.
Needs root and Debian packages (CI has both); skipped otherwise.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import PIPELINE, ROOT, copy_repo, run_in

# one SLURM on this node at a time, beside the shared run it compares with
pytestmark = [pytest.mark.e2e, PIPELINE]

SCRIPT = ROOT / "workflow/scripts/local_slurm.sh"
PROFILE = ROOT / "workflow/profiles/slurm/config.yaml"
TARGET = "results/smoke/smoke.json"  # prepare -> smoke
# The copy's params.yaml smokes two steps; the override brings it back to the shared run's one. The
# override must reach the stage inside each SLURM job (the plugin's Snakemake in the job resolves the
# config again), or smoke.json has a step too many.
OVERRIDES = {"smoke": {"steps": 1}}
PARTITIONS = {"prepare": "cpu", "smoke": "gpu"}


@pytest.fixture
def local_slurm(tmp_path: Path) -> Path:
    """A running one-node SLURM (its state folder); stopped by the PIDs the script recorded."""
    if os.geteuid() != 0:
        pytest.skip("a local SLURM needs root (workflow/scripts/local_slurm.sh)")
    state = tmp_path / "slurm"
    env = {**os.environ, "ORCHESTRY_SLURM_DIR": str(state)}
    link = Path("/etc/slurm/slurm.conf")
    if not link.exists() and not link.is_symlink():
        # what a run killed before `stop` leaves: the script's link to a cluster no longer running;
        # `start` must replace it, not refuse (this suite once skipped so)
        killed = tmp_path / "killed"
        killed.mkdir()
        (killed / "slurm.conf").write_text(
            "# written by workflow/scripts/local_slurm.sh: a one-node test cluster\n"
        )
        (killed / "pids").write_text("slurmctld 4194305\n")  # above every pid_max: not alive
        link.parent.mkdir(exist_ok=True)
        link.symlink_to(killed / "slurm.conf")

    def script(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=600
        )

    try:
        started = script("start")
        assert "is not this script's" not in started.stderr, started.stderr
        if started.returncode == 3:  # this machine cannot (no apt-get, no packages): say why
            pytest.skip(started.stderr.strip())
        assert started.returncode == 0, started.stdout + started.stderr
        yield state
    finally:
        stopped = script("stop")
        if link.is_symlink() and "killed" in str(link.readlink()):  # start stopped early
            link.unlink()
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


def one_node_profile(dest: Path) -> Path:
    """The slurm profile with each job's memory capped at this node's and one CPU a job; nothing
    else changed."""
    node = subprocess.run(
        ["scontrol", "show", "node"], capture_output=True, text=True, check=True
    ).stdout
    cpus = int(re.search(r"CPUTot=(\d+)", node).group(1))
    mem_mb = int(re.search(r"RealMemory=(\d+)", node).group(1))
    profile = yaml.safe_load(PROFILE.read_text())
    for resources in [profile["default-resources"], *profile["set-resources"].values()]:
        # one CPU a job: beside the other test process, two OpenMP threads on 2 cores spin-wait
        resources["cpus_per_task"] = min(resources["cpus_per_task"], cpus, 1)
        resources["mem_mb"] = min(resources["mem_mb"], mem_mb)
    # and one thread a rule: Snakemake in the job sets OMP_NUM_THREADS to the rule's `threads` (2 for
    # the model stages), whatever the job's CPUs; a smoke step then took 288 s instead of 18
    profile["set-threads"] = dict.fromkeys(PARTITIONS, 1)
    dest.mkdir()
    (dest / "config.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return dest


def slurm_jobs(repo: Path) -> dict[str, str]:
    """Rule -> SLURM job id, from the plugin's per-job logs (.snakemake/slurm_logs/rule_R/ID.log)."""
    logs = sorted((repo / ".snakemake/slurm_logs").glob("rule_*/*.log"))
    return {log.parent.name.removeprefix("rule_"): log.stem for log in logs}


def job_record(job_id: str) -> dict[str, str]:
    """`scontrol show job`'s Key=Value pairs (the cluster keeps finished jobs for MinJobAge)."""
    out = subprocess.run(
        ["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def test_slurm_profile_runs_the_pipeline_like_dvc(tiny_pipeline, local_slurm, tmp_path):
    local = tiny_pipeline.repo  # the shared run: `dvc repro` on the same params
    repo = copy_repo(tmp_path / "repo")
    params = yaml.safe_load((local / "params.yaml").read_text())
    assert params["smoke"]["steps"] == OVERRIDES["smoke"]["steps"]
    params["smoke"]["steps"] = 2
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (repo / "overrides.yaml").write_text(yaml.safe_dump(OVERRIDES))

    run_in(
        repo,
        "snakemake",
        "--profile",
        str(one_node_profile(tmp_path / "profile")),
        TARGET,
        "--configfile",
        "overrides.yaml",
        # this cluster has no accounting database (sacct): squeue sees finished jobs for MinJobAge
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "2",
        "--seconds-between-status-checks",  # each finished job seen in a second, not ten
        "1",
        "--slurm-keep-successful-logs",  # the per-job logs name the SLURM job ids checked below
        timeout=1500,  # minutes on an idle 2-core machine; a loaded one is several times slower
    )

    jobs = slurm_jobs(repo)
    assert set(jobs) == set(PARTITIONS), jobs
    completed = (local_slurm / "jobcomp.log").read_text()
    for rule, job_id in jobs.items():
        record = job_record(job_id)
        assert record["JobState"] == "COMPLETED", (rule, record)
        assert record["Partition"] == PARTITIONS[rule], (rule, record)
        assert ("gpu:1" in record.get("TresPerJob", "")) == (PARTITIONS[rule] == "gpu"), record
        assert f"JobId={job_id} " in completed, rule

    assert json.loads((repo / TARGET).read_text())["steps"] == 1
    # the same samples, rewards and losses: smoke's one step reports the loss of its first update,
    # before any weight changed, so one thread (a SLURM job) and the shared run's agree to the bit
    for name in ["data/prepared/train.jsonl", "data/prepared/test.jsonl", TARGET]:
        assert (repo / name).read_bytes() == (local / name).read_bytes(), name
