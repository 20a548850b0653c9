"""`prepare.drop_over_budget` (issue 57): the prepare stage drops every code problem whose taught
answer (a role's part, or the single agent's whole program) is over the budget
(`prepare.budget_tokens`, else `sampling.max_new_tokens`), counted as the warm start counts it; with
the flag off it writes what it always wrote."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULTS, MODEL_CACHE, ROOT
from xdist_marks import one_process

from orchestry.agents.lora.shapes import embedded_tokenizer
from orchestry.algos.sft import over_budget, solo_rows, team_rows
from orchestry.envs.code.answers import over_budget_parts, taught_answers
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.solo import SoloEnv
from orchestry.params import ParamsError, parse_params
from orchestry.stages import prepare
from orchestry.stages.from_params import make_env

pytestmark = one_process(__name__)

BUDGET = 100
"""Tokens: some of the 36 coop problems have an answer over it (the longest single program is
about 300 tokens, the shortest helper about 20), most do not."""
ALL_COOP = {"coop": {"n_train": 20, "n_test": 16}}


def _prepare(workdir: Path, raw: dict) -> dict[str, list[dict]]:
    """Run the stage in `workdir` (the repository's data/coop beside it); its rows and summary."""
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    if not (workdir / "data/coop").exists():
        (workdir / "data/coop").symlink_to(ROOT / "data/coop")
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        prepare.run(parse_params(raw))
    finally:
        os.chdir(cwd)
    out = workdir / "data/prepared"
    rows = {s: [json.loads(x) for x in (out / f"{s}.jsonl").open()] for s in ("train", "test")}
    return {**rows, "summary": json.loads((out / "summary.json").read_text())}


class _Tokenizing:
    """What `sft.team_rows` and `sft.solo_rows` use of a policy: the training tokenizer (the
    embedded model's converted folder), the prompts left empty."""

    def __init__(self) -> None:
        self._tokenizer = embedded_tokenizer(MODEL_CACHE)

    def prompt_ids(self, agent, messages):
        return []

    def tokenizer(self, agent):
        return self._tokenizer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The whole coop set prepared with the flag off, and on at `BUDGET` tokens."""
    root = tmp_path_factory.mktemp("budget")
    off = _prepare(root / "off", {"prepare": {"sets": ALL_COOP}})
    keys = {"prepare": {"sets": ALL_COOP, "drop_over_budget": True}}
    on = _prepare(root / "on", {**keys, "sampling": {"max_new_tokens": BUDGET}})
    return off, on


def test_it_drops_exactly_what_the_warm_start_could_not_write_whole(runs):
    off, on = runs
    problems = load_problem_dir(ROOT / "data/coop")
    env, policy = make_env(DEFAULTS), _Tokenizing()
    rows = team_rows(policy, env, problems) + solo_rows(policy, SoloEnv(env), env, problems)
    expected = set(over_budget(rows, BUDGET))
    assert 0 < len(expected) < len(problems)
    assert any(agents == ["single"] for agents in over_budget(rows, BUDGET).values())
    for split in ("train", "test"):  # the flag-off split less the dropped, rows unchanged
        assert on[split] == [row for row in off[split] if row["id"] not in expected]
    dropped = {
        split: sum(row["id"] in expected for row in off[split]) for split in ("train", "test")
    }
    assert on["summary"] == {
        **off["summary"],  # each set's split before the drop
        "dropped_over_budget": {"coop": {**dropped, "ids": sorted(expected)}},
        "max_new_tokens": BUDGET,
        "tokenizer": "smollm2-135m-instruct",
    }


def test_the_counted_answers_are_the_taught_ones():
    """`taught_answers` are the texts sft tokenizes; a part counts its end of sequence."""
    problems = load_problem_dir(ROOT / "data/coop")[:4]
    seen: list[str] = []

    class Recording:
        eos_token_id = 0

        def __call__(self, text, add_special_tokens):
            seen.append(text)
            return {"input_ids": [1] * len(text)}

    class Policy:
        def prompt_ids(self, agent, messages):
            return []

        def tokenizer(self, agent):
            return Recording()

    env = make_env(DEFAULTS)
    team_rows(Policy(), env, problems)
    solo_rows(Policy(), SoloEnv(env), env, problems)
    taught = [taught_answers(p) for p in problems]
    assert sorted(seen) == sorted(text for answers in taught for text in answers.values())
    assert all(list(answers) == ["aux", "main", "single"] for answers in taught)
    single = len(taught[0]["single"])
    assert over_budget_parts(problems[0], len, single + 1) == []
    assert over_budget_parts(problems[0], len, single) == ["single"]


def test_with_the_flag_off_it_writes_what_the_pipeline_committed(tmp_path):
    """The outputs dvc.lock records for the prepare stage, from the params it records."""
    stage = yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]["prepare"]
    raw = stage["params"]["params.yaml"]
    assert not raw["prepare"].get("drop_over_budget", False)
    _prepare(tmp_path, raw)
    for out in stage["outs"]:
        digest = hashlib.md5((tmp_path / out["path"]).read_bytes()).hexdigest()
        assert digest == out["md5"], out["path"]


def test_the_default_path_loads_no_model_stack(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data/coop").symlink_to(ROOT / "data/coop")
    code = (
        "import sys\n"
        "from orchestry.params import parse_params\n"
        "from orchestry.stages import prepare\n"
        "prepare.run(parse_params({}))\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("keys", "needle"),
    [
        (
            {"env": {"name": "story"}, "prepare": {"sets": {"story": {"n_train": 1, "n_test": 1}}}},
            "env.name story has no code problems",
        ),
        (
            {"model": {"agent_models": {"main": "Qwen/Qwen2.5-Coder-3B-Instruct"}}},
            "model.agent_models gives",
        ),
    ],
)
def test_a_count_it_cannot_make_is_an_error_naming_the_key(tmp_path, monkeypatch, keys, needle):
    monkeypatch.chdir(tmp_path)
    raw = {**keys, "prepare": {**keys.get("prepare", {}), "drop_over_budget": True}}
    with pytest.raises(ValueError, match=needle):
        prepare.run(parse_params(raw))


def test_budget_tokens_keeps_its_sets_under_more_new_tokens(runs, tmp_path):
    """A run with 4x the new tokens and `prepare.budget_tokens` at `BUDGET` answers the problems of
    the `BUDGET` run (issue 57's 512-token control on the 256-token sets); its summary says both."""
    _, on = runs
    keys = {"sets": ALL_COOP, "drop_over_budget": True, "budget_tokens": BUDGET}
    wide = _prepare(tmp_path, {"prepare": keys, "sampling": {"max_new_tokens": 4 * BUDGET}})
    assert (wide["train"], wide["test"]) == (on["train"], on["test"])
    assert wide["summary"] == {
        **on["summary"],
        "max_new_tokens": 4 * BUDGET,
        "budget_tokens": BUDGET,
    }


def test_the_budget_is_max_new_tokens_unless_budget_tokens_is_set():
    """`prepare.budget_tokens` keeps one budget's sets under another `sampling.max_new_tokens`."""
    assert prepare.budget_tokens(parse_params({})) == DEFAULTS.sampling.max_new_tokens
    assert prepare.budget_tokens(parse_params({"sampling": {"max_new_tokens": 512}})) == 512
    raw = {"sampling": {"max_new_tokens": 512}, "prepare": {"budget_tokens": 256}}
    assert prepare.budget_tokens(parse_params(raw)) == 256


@pytest.mark.parametrize("tokens", [0, -256])
def test_a_budget_under_one_token_is_refused_naming_the_key(tokens):
    with pytest.raises(ParamsError, match="prepare.budget_tokens"):
        parse_params({"prepare": {"budget_tokens": tokens}})
