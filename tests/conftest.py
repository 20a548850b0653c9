"""Shared fixtures: a throwaway copy of the repository with a tiny params file."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):  # one of `make test`'s processes, beside another
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # before torch loads; stages inherit it
        os.environ.setdefault(var, "1")

import pytest
import torch
import yaml

from orchestry.agents.base import SamplingSpec
from orchestry.agents.lora import base_model
from orchestry.agents.lora.base_model import ModelSpec
from orchestry.agents.lora.team import LoraSpec
from orchestry.envs.code.reward import RewardWeights
from orchestry.envs.code.sandbox import SandboxLimits
from orchestry.params import Params, parse_params
from orchestry.stages import from_params

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The embedded model converted once per checkout, as the stages of every tiny run read it (the
# conversion is atomic, so two test processes may race to make it).
MODEL_CACHE = ROOT / "cache" / "models"
DEFAULTS = Params()  # the schema's defaults (== params.yaml, tests/test_params.py checks it)
# Every test that loads the model loads its weights in float32, not the params' bfloat16: a CPU
# without AVX512-BF16 or AMX emulates bfloat16 (an AMD EPYC with AVX2 only: an update forward 8.66
# times float32's time, results/bench/cpu_kernels_avx2.json), and each CPU that has it
# rounds it its own way, so which tiny completions parse would depend on the CI's machine
# (docs/provenance.md). Tests of bfloat16 itself ask for it by name.
TEST_DTYPE = "float32"


def sampling(**changes) -> SamplingSpec:
    """The default params' sampling with some fields changed."""
    return replace(from_params.sampling_spec(DEFAULTS), **changes)


def limits(**changes) -> SandboxLimits:
    return replace(from_params.sandbox_limits(DEFAULTS), **changes)


def weights(**changes) -> RewardWeights:
    return RewardWeights(**{**DEFAULTS.reward.model_dump(), **changes})


def model_spec(**changes) -> ModelSpec:
    """The default params' model spec, in TEST_DTYPE unless `changes` name a dtype."""
    return replace(from_params.model_spec(DEFAULTS), **{"dtype": TEST_DTYPE, **changes})


@pytest.fixture(autouse=True)
def _no_unasked_bfloat16(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that loads the model in bfloat16 on the CPU fails unless it is marked `bfloat16`
    (TEST_DTYPE says why): one that forgot `cpu_params` or `model_spec` costs minutes, not an error."""
    if request.node.get_closest_marker("bfloat16"):
        return
    resolve = base_model.resolve_dtype

    def float32_unless_asked(dtype: str, device: torch.device) -> torch.dtype:
        resolved = resolve(dtype, device)
        if resolved == torch.bfloat16 and device.type == "cpu":
            raise AssertionError(
                "this test loads the model in bfloat16 on the CPU: build its params with "
                "conftest.cpu_params or its spec with conftest.model_spec (TEST_DTYPE), or mark "
                "it pytest.mark.bfloat16"
            )
        return resolved

    monkeypatch.setattr(base_model, "resolve_dtype", float32_unless_asked)


def cpu_params(raw: dict | None = None) -> Params:
    """`raw` (params.yaml's sections) parsed as a stage parses it, the weights in TEST_DTYPE."""
    raw = dict(raw or {})
    raw["model"] = {**raw.get("model", {}), "dtype": TEST_DTYPE}
    return parse_params(raw)


def lora(**changes) -> LoraSpec:
    return replace(from_params.lora_spec(DEFAULTS), **changes)


def tiny_params(**overrides: dict) -> dict:
    """The repo's params.yaml shrunk so a whole pipeline runs in a couple of minutes on 2 cores."""
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["model"]["cache_dir"] = str(MODEL_CACHE)  # reuse the converted model
    p["model"]["dtype"] = TEST_DTYPE
    # 64: fewer and no completion parses, every reward is 0 and smoke (rightly) finds no update
    p["sampling"]["max_new_tokens"] = 64
    p["prepare"]["sets"] = {
        "coop": {"n_train": 3, "n_test": 1},
        "humaneval": {"n_train": 0, "n_test": 0},
    }
    p["train"].update(
        max_steps=2, problems_per_step=1, group_size=4, checkpoint_every=1, warmup_steps=0
    )
    p["smoke"].update(steps=1, problems=2)
    p["evaluate"].update(n_samples=2, bootstrap=20)
    p["prompt_policy"].update(rounds=1, minibatch=1, samples=1, pareto_tasks=1, reflect_tokens=24)
    p["beam"].update(width=1, k=2, turns=1, searches=1)
    p["orchestrate"].update(
        cost_weights=[0.0, 0.01], updates=1, episodes=2, max_steps=2, checkpoint_every=1
    )
    for section, values in overrides.items():
        if isinstance(values, dict):
            p[section].update(values)
        else:
            p[section] = values
    return p


def converted_model() -> Path:
    """The embedded model converted into MODEL_CACHE by this process (kept if there). A test whose
    first model load may be in several ranks at once calls it first, so that the ranks load one
    conversion rather than each making its own (each would be whole: tests/agents/test_dist.py)."""
    return base_model.convert_gguf_model(
        base_model.embedded_gguf_path(), MODEL_CACHE / base_model.EMBEDDED_MODEL
    )


def copy_repo(dest: Path) -> Path:
    """Copy the working tree's tracked and unignored files into `dest` and make it a git + DVC repo."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file() and not rel.startswith(("results/", "reports/figures", "data/prepared")):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for stale in ["dvc.lock", "optional/dvc.lock", "optional/runs/dvc.lock"]:
        (dest / stale).unlink(missing_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "copy"], cwd=dest, check=True, env=env)
    return dest


def run_in(
    cwd: Path, *cmd: str, timeout: int = 900, check: bool = True
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


@pytest.fixture
def tiny_repo(tmp_path: Path):
    """A fresh repo copy with tiny params; returns (path, write_params). The model is converted
    first: a test's first stage may start several ranks (`train.processes`, `evaluate.processes`)."""
    converted_model()
    repo = copy_repo(tmp_path / "repo")

    def write(**overrides: dict) -> Path:
        path = repo / "params.yaml"
        path.write_text(yaml.safe_dump(tiny_params(**overrides), sort_keys=False))
        return path

    write()
    return repo, write


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests first (whole pipelines, then model training, then the rest; collection
    order within each): `make test`'s two processes take tests in this order, so none of the
    minutes-long ones is left to start when the other process has run dry."""

    def rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("e2e") else 1 if item.get_closest_marker("slow") else 2

    items.sort(key=rank)
    outside = [
        i.nodeid
        for i in items
        if "tiny_pipeline" in getattr(i, "fixturenames", ())
        and PIPELINE.args not in [m.args for m in i.iter_markers("xdist_group")]
    ]
    if outside:  # each would make a second process build the tiny pipeline (7 minutes of it)
        raise pytest.UsageError(f"tests reading tiny_pipeline outside its xdist group: {outside}")


# --- The shared tiny pipeline --------------------------------------------------------------------

# The whole-pipeline tests read one tiny run instead of each making its own. They sit in this xdist
# group, so one `make test` process builds the run once and takes them all, while the other process
# takes the rest of the suite.
PIPELINE = pytest.mark.xdist_group("tiny_pipeline")


@dataclass(frozen=True)
class PipelineRun:
    """A tiny repo after `dvc repro optional/dvc.yaml` then `dvc repro`, with what each printed."""

    repo: Path
    optional_log: str  # prepare, smoke, train, orchestrate: what the opt-in stage needs
    default_log: str  # the rest of the default pipeline


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory: pytest.TempPathFactory) -> PipelineRun:
    """Both DVC pipelines run once on tiny params. Tests read it; a test that would change it works
    in a copy (`copy_run`). The run is kept on disk for the whole session: pytest-xdist tears session
    fixtures down whenever a process's queue runs dry, and the next test must find it, not redo it."""
    base = tmp_path_factory.getbasetemp() / "tiny_pipeline"
    logs = base / "logs.json"
    if logs.is_file():
        return PipelineRun(base / "repo", **json.loads(logs.read_text()))
    shutil.rmtree(base, ignore_errors=True)
    repo = copy_repo(base / "repo")
    # the warm start on, so the run checks that training starts from it (tests/stages/test_sft_stage.py)
    warm = {"enabled": True, "problems": 2, "batch_rows": 2, "lr": 2e-3}
    (repo / "params.yaml").write_text(yaml.safe_dump(tiny_params(sft=warm), sort_keys=False))
    optional = run_in(repo, "dvc", "repro", "optional/dvc.yaml", timeout=1500)
    default = run_in(repo, "dvc", "repro", timeout=1500)
    run = {
        "optional_log": optional.stdout + optional.stderr,
        "default_log": default.stdout + default.stderr,
    }
    logs.write_text(json.dumps(run))
    return PipelineRun(repo, **run)


def copy_run(run: PipelineRun, dest: Path) -> Path:
    """A copy of the shared run's repo (git, DVC state, outputs and timestamps) to change freely."""
    shutil.copytree(run.repo, dest, symlinks=True)
    return dest
