"""The environment registry (orchestry/envs/registry.py): a new environment is its class and one
`register` line. The toy environment here lives in this file alone and goes through the real
prepare, train and evaluate stages with the embedded model (one gradient step, 16 new tokens)."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from conftest import tiny_params

from orchestry.envs.base import Messages, Outcome, Roles, Turn, check_env, with_history
from orchestry.envs.catalog import CATALOG, EnvEntry
from orchestry.envs.options import EnvOptions
from orchestry.envs.registry import ENVIRONMENTS, EnvKind, env_kind, register
from orchestry.params import parse_params


@dataclass(frozen=True)
class Word:
    id: str
    word: str


class WordSets:
    """Two tasks: say a word."""

    SETS = ("toy_words",)

    def load_set(self, name: str) -> list[Word]:
        return [Word("w0", "apple"), Word("w1", "pear"), Word("w2", "plum"), Word("w3", "fig")]

    def to_dict(self, task: Word) -> dict[str, Any]:
        return {"id": task.id, "word": task.word}

    def task_from_dict(self, row: dict[str, Any]) -> Word:
        return Word(row["id"], row["word"])


class EchoEnv:
    """Each agent earns half a point when its answer holds the task's word."""

    sequential = False

    def __init__(self, roles: Roles, options: EnvOptions) -> None:
        self.roles = roles

    def observe(self, task: Word, agent: str, history: Sequence[Turn] = ()) -> Messages:
        first = [{"role": "user", "content": f"{agent}, say the word {task.word}."}]
        return with_history(first, history)

    def act(self, task: Word, agent: str, text: str) -> str:
        return text.strip()

    def score(self, batch: Sequence[tuple[Word, Mapping[str, str]]]) -> list[Outcome]:
        out = []
        for task, actions in batch:
            parts = {a: 0.5 * (task.word in actions.get(a, "").lower()) for a in self.roles.agents}
            total = sum(parts.values())
            record = {"reward": {"total": total, **parts}}  # what the metrics read
            out.append(Outcome(total, {"said": total}, record, f"said: {parts}"))
        return out

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        return outcome.notes

    def reference(self, task: Word, agent: str) -> str | None:
        return None


TOY = EnvKind("toy", EchoEnv, WordSets(), ("left", "right"))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(ENVIRONMENTS, "toy", TOY)  # registered for this test only
    monkeypatch.setitem(CATALOG, "toy", EnvEntry(None, TOY.tasks.SETS, TOY.roles))
    return TOY


def test_an_unknown_name_lists_the_registered_environments():
    with pytest.raises(KeyError, match="'poem'; registered: code, code_review, story, writing"):
        env_kind("poem")
    with pytest.raises(ValueError, match="unknown environment 'poem'"):
        parse_params({"env": {"name": "poem"}})


def test_a_name_is_registered_once(toy):
    with pytest.raises(ValueError, match="'toy' is registered already"):
        register(EnvKind("toy", EchoEnv, WordSets(), ("a", "b")))


def test_the_toy_environment_passes_the_contract(toy):
    env = toy.build(Roles.from_agents(toy.roles), None)
    outcomes = check_env(env, Word("w0", "apple"), {"left": "apple", "right": "no"})
    assert outcomes[0].total == 0.5


@pytest.mark.slow
def test_a_registered_environment_trains_and_evaluates(toy, tmp_path, monkeypatch):
    """Params name it, prepare splits its tasks, train takes a real gradient step with the
    embedded model, evaluate scores the trained team: no stage knows it beyond the registry."""
    from orchestry.stages import evaluate, prepare, train

    monkeypatch.chdir(tmp_path)
    raw = tiny_params(
        env={"name": "toy"},
        prepare={"sets": {"toy_words": {"n_train": 2, "n_test": 2}}},
        sampling={"max_new_tokens": 16},
        train={"max_steps": 1, "group_size": 2, "processes": 1},
        evaluate={"n_samples": 1, "processes": 1},
    )
    params = parse_params(raw)
    assert params.model.agents == ["left", "right"]  # the env's roles
    prepare.run(params)
    train.run(params)
    history = (tmp_path / "results/train/history.csv").read_text().splitlines()
    assert len(history) == 2  # the header and the one step
    assert any((tmp_path / "results/train/adapters").iterdir())
    evaluate.run(params)
    rows = [
        json.loads(line)
        for line in (tmp_path / "results/evaluate/generations.jsonl").read_text().splitlines()
    ]
    assert len(rows) == 2 and {r["method"] for r in rows} == {"magrpo"}  # 2 test tasks, 1 sample
    assert all(set(r["reward"]) == {"total", "left", "right"} for r in rows)
    metrics = json.loads((tmp_path / "results/evaluate/metrics.json").read_text())
    assert metrics


@pytest.mark.parametrize("name", ["code", "code_review", "story", "writing"])
def test_the_catalogue_says_what_each_environment_s_module_holds(name):
    """Params validation reads envs/catalog.py, never the env: the two must agree."""
    kind = env_kind(name)  # imports the module, and checks the entry itself
    entry = CATALOG[name]
    assert (kind.name, tuple(kind.tasks.SETS), kind.roles) == (name, entry.sets, entry.roles)
    assert kind.code_problems == entry.code_problems


def test_the_catalogue_s_tool_names_are_the_tool_registry_s():
    from orchestry.envs.catalog import TOOL_NAMES
    from orchestry.envs.tools.registry import DESCRIPTIONS

    assert TOOL_NAMES == tuple(DESCRIPTIONS)


def test_validating_params_imports_no_environment():
    """Naming an env in params loads no env module: each is imported when a stage builds it."""
    import subprocess
    import sys

    code = (
        "import sys; from orchestry.params import parse_params; "
        "parse_params({'env': {'name': 'story'}}); "
        "print(sorted(m for m in sys.modules if m.startswith('orchestry.envs.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = eval(out.stdout)
    assert not [m for m in loaded if m.split(".")[2] in CATALOG], loaded
