"""params.yaml validation (one clear line, exit 2, nothing written); defaults and docs from one schema."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from orchestry.bookkeeping.params_doc import (
    json_schema_text,
    params_reference_markdown,
    with_params_reference,
)
from orchestry.cli import main
from orchestry.params import (
    Params,
    ParamsError,
    SetSplit,
    load_params,
    parse_params,
)

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
        (
            {"beam": {"judge_weight": -1}},
            "beam.judge_weight: Input should be greater than or equal to 0",
        ),
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


def test_params_yaml_sets_exactly_the_schema_defaults():
    """A default in orchestry/params.py cannot drift from the committed config again."""
    repo, defaults = load_params(ROOT / "params.yaml"), Params()
    diffs = [
        f"{name}: params.yaml {getattr(repo, name)!r} != default {getattr(defaults, name)!r}"
        for name in Params.model_fields
        if getattr(repo, name) != getattr(defaults, name)
    ]
    assert not diffs, diffs
    assert repo == defaults


def _leaf_fields(model, path=""):
    """(key path, field) for every non-section key, nested sections included."""
    for name, field in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaf_fields(annotation, key)
        else:
            yield key, field


def test_every_param_has_a_description_in_the_reference():
    fields = {**dict(_leaf_fields(Params)), **dict(_leaf_fields(SetSplit, "prepare.sets.<name>"))}
    assert "model.lora.r" in fields and "train.lr" in fields
    assert [k for k, f in fields.items() if not (f.description or "").strip()] == []
    reference = params_reference_markdown()
    for key in fields:
        assert f"| `{key}` |" in reference, key


def test_the_params_reference_page_is_current():
    page = (ROOT / "docs/params.md").read_text()
    assert with_params_reference(page) == page, (
        "run `python -m orchestry params-doc` to regenerate docs/params.md"
    )


def test_params_doc_check_names_the_stale_line(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "docs/params.md").read_text()
    stale = readme.replace(
        "| `train.lr` | float > 0 | `0.0002` |", "| `train.lr` | float > 0 | `1e-4` |"
    )
    assert stale != readme
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/params.md").write_text(stale)
    monkeypatch.chdir(tmp_path)
    assert main(["params-doc", "--check"]) == 1
    err = capsys.readouterr().err
    line = stale.splitlines().index(next(x for x in stale.splitlines() if "`1e-4`" in x)) + 1
    assert f"line {line}:" in err and "train.lr" in err
    assert (tmp_path / "docs/params.md").read_text() == stale, "--check writes nothing"
    assert main(["params-doc"]) == 0
    assert (tmp_path / "docs/params.md").read_text() == readme
    assert main(["params-doc", "--check"]) == 0
