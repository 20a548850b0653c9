"""Params overrides reach the stages: Snakemake's --config / --configfile and DVC's `exp run -S`.

Each engine resolves its own params (Snakemake merges its overrides into `config`, DVC edits params.yaml);
these tests check that the stage then runs on them, through `prepare` (seconds on the tiny params): the
number of prepared problems is `prepare.sets.coop.n_train` / `n_test`.
"""

from pathlib import Path

import pytest
import yaml
from conftest import run_in

from orchestry.params import load_params
from orchestry.params.resolved import resolve_config

PREPARED = ["data/prepared/train.jsonl", "data/prepared/test.jsonl"]


def prepared_sizes(repo: Path) -> tuple[int, int]:
    return tuple(len((repo / name).read_text().splitlines()) for name in PREPARED)


@pytest.mark.slow
def test_snakemake_overrides_reach_the_stage(tiny_repo):
    repo, _ = tiny_repo  # tiny params: coop n_train 3, n_test 1
    (repo / "small.yaml").write_text(
        yaml.safe_dump({"prepare": {"sets": {"coop": {"n_train": 2}}}})
    )
    run_in(repo, "snakemake", "--cores", "1", *PREPARED, "--configfile", "small.yaml")
    assert prepared_sizes(repo) == (2, 1)
    # --config reaches Snakemake as strings ("1"); the stage gets the schema's int
    run_in(
        repo,
        "snakemake",
        "--cores",
        "1",
        *PREPARED,
        "--config",
        "prepare={sets: {coop: {n_test: 2}}}",
    )
    assert prepared_sizes(repo) == (3, 2)
    # without overrides the stage reads params.yaml again, and its command is dvc.yaml's
    plain = run_in(repo, "snakemake", "--cores", "1", "-p", *PREPARED)
    assert "python -m orchestry --log logs/prepare.log prepare" in plain.stdout + plain.stderr
    assert prepared_sizes(repo) == (3, 1)
    # an override of another section changes the params file's name but reruns nothing here
    other = run_in(
        repo, "snakemake", "--cores", "1", *PREPARED, "--config", "figures={smoothing: 3}"
    )
    assert "Nothing to be done" in other.stdout + other.stderr


def test_snakemake_bad_override_key_stops_before_any_job(tiny_repo):
    repo, _ = tiny_repo
    proc = run_in(
        repo,
        "snakemake",
        "--cores",
        "1",
        *PREPARED,
        "--config",
        "train={max_stepz: 1}",
        check=False,
    )
    assert proc.returncode != 0
    assert "unknown key 'train.max_stepz'" in proc.stdout + proc.stderr
    assert not (repo / "data/prepared").exists()


@pytest.mark.slow
def test_dvc_exp_run_set_reaches_the_stage(tiny_repo):
    repo, _ = tiny_repo
    run_in(repo, "dvc", "exp", "run", "-S", "prepare.sets.coop.n_train=2", "prepare")
    assert prepared_sizes(repo) == (2, 1)
    # DVC refuses a key params.yaml lacks; forced in with `+`, the stage stops naming it (exit 2)
    refused = run_in(repo, "dvc", "exp", "run", "-S", "prepare.sets.coop.n_trian=1", check=False)
    assert refused.returncode != 0
    assert "prepare.sets.coop.n_trian" in refused.stderr
    forced = run_in(
        repo, "dvc", "exp", "run", "-S", "+prepare.sets.coop.n_trian=1", "prepare", check=False
    )
    assert forced.returncode != 0
    assert "unknown key 'prepare.sets.coop.n_trian'" in forced.stdout + forced.stderr


def test_resolved_config_is_one_file_per_content(tmp_path):
    params_yaml = Path(__file__).resolve().parents[2] / "params.yaml"
    same = yaml.safe_load(params_yaml.read_text())
    assert resolve_config(same, params_yaml, tmp_path) is None  # the stages read params.yaml
    assert not list(tmp_path.iterdir())

    changed = yaml.safe_load(params_yaml.read_text())
    changed["train"]["max_steps"] = "7"  # as Snakemake's --config passes nested values
    path = resolve_config(changed, params_yaml, tmp_path)
    assert changed["train"]["max_steps"] == 7  # typed in place: the rules' params see the int
    assert load_params(path).train.max_steps == 7
    again = yaml.safe_load(params_yaml.read_text())
    again["train"]["max_steps"] = 7
    assert resolve_config(again, params_yaml, tmp_path) == path  # the same name in every process
    assert list(tmp_path.iterdir()) == [path]
