"""DVC and Snakemake run identical commands with identical inputs, outputs and params."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestry.bookkeeping.stage_runs import OPTIONAL

ROOT = Path(__file__).resolve().parents[1]
# DVC and Snakemake run in the repository itself here (its DVC lock): one test process takes them all
pytestmark = pytest.mark.xdist_group("repository_root")
BIN = Path(sys.executable).parent
ENV = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}


def run(*cmd: str) -> str:
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


DVC_FILES = ("dvc.yaml", str(OPTIONAL))  # the default pipeline, and the opt-in stages


FINGERPRINTS = (
    "fingerprints"  # dvc.yaml's first stage; Snakemake writes them when it reads the Snakefile
)


def dvc_stages() -> dict[str, dict]:
    """Stage name -> {cmd, deps, outs, params} of both dvc.yaml files, with foreach expanded."""
    spec = {}
    for name in DVC_FILES:
        spec.update(yaml.safe_load((ROOT / name).read_text())["stages"])
    stages = {}
    for name, st in spec.items():
        items = st["foreach"] if "foreach" in st else [None]
        body = st.get("do", st)
        for item in items:
            text = yaml.safe_dump(body)
            if item is not None:
                text = text.replace("${item}", item)
            s = yaml.safe_load(text)
            outs = [
                next(iter(o)) if isinstance(o, dict) else o
                for o in s.get("outs", []) + s.get("metrics", [])
            ]
            stages[f"{name}@{item}" if item else name] = {
                "cmd": s["cmd"],
                "deps": set(s.get("deps", [])),
                "outs": set(outs),
                "params": {
                    key
                    for p in s.get("params", [])
                    for key in ([p] if isinstance(p, str) else [k for v in p.values() for k in v])
                },
            }
    return stages


def snakemake_jobs() -> dict[str, dict]:
    """Command -> {inputs, outputs} from a forced dry run."""
    out = run("snakemake", "-n", "-F", "-p", "all", "orchestrate")
    jobs = {}
    for block in out.split("rule ")[1:]:
        if not block.startswith(
            (
                "all:",
                "prepare:",
                "sft:",
                "smoke:",
                "train:",
                "train_single:",
                "baseline:",
                "evaluate:",
                "evaluate_single:",
                "prompt_policy:",
                "beam:",
                "schemes:",
                "figures:",
                "orchestrate:",
            )
        ):
            continue
        fields = dict(re.findall(r"^    (input|output): (.*)$", block, re.M))
        cmd = re.search(r"^Shell command: (.*)$", block, re.M)
        if cmd and "output" in fields:
            jobs[cmd.group(1).strip()] = {
                "inputs": {x.strip() for x in fields.get("input", "").split(",") if x.strip()},
                "outputs": {x.strip() for x in fields["output"].split(",")},
            }
    return jobs


def snakemake_params() -> dict[str, set[str]]:
    """Rule name -> params.yaml sections the rule declares as params."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "workflow/rules").glob("*.smk")))
    rules = {}
    for block in re.split(r"^rule ", text, flags=re.M)[1:]:
        name = block.split(":", 1)[0]
        rules[name] = set(re.findall(r'=config\["(\w+)"\]', block))
    return rules


@pytest.fixture(scope="module")
def both():
    return dvc_stages(), snakemake_jobs()


def test_same_commands(both):
    dvc, smk = both
    dry = run("dvc", "repro", "--dry", "-f") + run("dvc", "repro", "--dry", "-f", DVC_FILES[1])
    dvc_cmds = set(re.findall(r"^> (.*)$", dry, re.M))
    assert dvc_cmds == {s["cmd"] for s in dvc.values()}
    # the fingerprints stage has no rule: the Snakefile writes them when it is read
    assert dvc_cmds - {dvc[FINGERPRINTS]["cmd"]} == set(smk)


def test_same_outputs_and_deps(both):
    dvc, smk = both
    for name, st in dvc.items():
        if name == FINGERPRINTS:
            continue
        job = smk[st["cmd"]]
        assert job["outputs"] == st["outs"], name
        assert job["inputs"] == st["deps"], name


def test_same_params_sections(both):
    dvc, _ = both
    smk = snakemake_params()
    for name, st in dvc.items():
        if name == FINGERPRINTS:
            continue
        assert smk[name.split("@")[0]] == st["params"], name


def test_snakemake_lint_is_clean():
    out = run("snakemake", "--lint")
    assert "Congratulations" in out


def test_dvc_lock_holds_the_package_as_it_is():
    """dvc.lock's `fingerprints` stage records the package folder: after any edit under orchestry/
    `dvc status` names that stage until `dvc repro -s fingerprints` (which rewrites only the
    fingerprints that changed, so no other stage moves) and the lock is committed with the edit."""
    status = run("dvc", "status", "fingerprints")
    assert "changed deps" not in status, f"run `dvc repro -s fingerprints`:\n{status}"
