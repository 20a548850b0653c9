"""params.yaml validation: one clear line, exit 2, nothing written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestry.params import ParamsError, json_schema_text, load_params, parse_params

ROOT = Path(__file__).resolve().parents[1]


def test_repo_params_are_valid_and_schema_file_is_current():
    load_params(ROOT / "params.yaml")
    assert (ROOT / "workflow/schemas/params.schema.json").read_text() == json_schema_text(), (
        "run `python -m orchestry schema` to regenerate the Snakemake schema"
    )


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"trian": {}}, "unknown key 'trian'; allowed keys: seed, model"),
        ({"train": {"epochs": "two"}}, "train.epochs"),
        (
            {"train": {"group_size": -4}},
            "train.group_size: Input should be greater than or equal to 2",
        ),
        (
            {"prepare": {"sets": {"coop": {"n_train": -1, "n_test": 2}}}},
            "prepare.sets.coop.n_train",
        ),
        ({"model": {"dtype": "int3"}}, "'float32', 'bfloat16', 'float16' or 'auto'"),
        ({"model": {"agents": ["a", "a"]}}, "agent names must be unique"),
    ],
)
def test_bad_values_name_the_key(data, needle):
    with pytest.raises(ParamsError) as err:
        parse_params(data)
    msg = str(err.value)
    assert needle in msg
    assert "\n" not in msg


def test_cli_exits_2_and_writes_nothing(tmp_path):
    bad = yaml.safe_load((ROOT / "params.yaml").read_text())
    bad["train"]["group_size"] = -1
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run(
        [sys.executable, "-m", "orchestry", "prepare"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "train.group_size" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_schema_is_valid_json_with_no_extra_keys():
    schema = json.loads(json_schema_text())
    assert schema["additionalProperties"] is False
