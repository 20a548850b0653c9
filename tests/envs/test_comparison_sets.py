"""The comparison's task sets (issue 57: envs/code/generated/heldout.py `comparison_set`):
`gen_train`, `gen_compose` and `gen_unseen_balanced`, as the code tasks load them and prepare
writes them."""

import json
from collections import Counter

import pytest
from xdist_marks import one_process

from orchestry.envs.catalog import CODE_SETS
from orchestry.envs.code import tasks
from orchestry.envs.code.generated import generated_set
from orchestry.envs.code.generated.heldout import compositional_pairs, family_of, pair_of
from orchestry.envs.code.problems import problem_from_dict, problem_to_dict
from orchestry.eval.paired import heldout_set
from orchestry.params import parse_params
from orchestry.stages import prepare

pytestmark = one_process(__name__)

NEW = ("gen_train", "gen_compose", "gen_unseen_balanced")


@pytest.fixture(scope="module")
def sets():
    return {name: tasks.load_set(name) for name in (*NEW, "gen", "gen_unseen")}


def test_the_sets_are_named_where_params_and_prepare_read_them():
    assert set(NEW) <= set(tasks.SETS) and tasks.SETS == CODE_SETS
    parse_params({"prepare": {"sets": {name: {"n_train": 0, "n_test": 5} for name in NEW}}})


def test_gen_train_and_gen_compose_split_gen_by_pair(sets):
    train, compose, gen = sets["gen_train"], sets["gen_compose"], sets["gen"]
    assert (len(train), len(compose)) == (1909, 240)
    assert {p.source for p in train} == {"gen"} and all(p.id.startswith("gen/") for p in train)
    held = compositional_pairs(gen)
    assert train == [p for p in gen if pair_of(p) not in held]
    # held out by pair: no (family, primitives) of gen_compose is trained on, and together they
    # are gen's pairs, each once
    train_pairs, compose_pairs = {pair_of(p) for p in train}, {pair_of(p) for p in compose}
    assert not train_pairs & compose_pairs
    assert train_pairs | compose_pairs == {pair_of(p) for p in gen}
    assert len(compose_pairs) == 240


def test_gen_compose_is_its_own_source_and_spread_over_the_families(sets):
    compose = sets["gen_compose"]
    assert {p.source for p in compose} == {"gen_compose"}
    assert all(p.id.startswith("gen_compose/") for p in compose)
    assert {heldout_set(p.id) for p in compose} == {"gen_compose"}  # reported per held-out set
    families = Counter(family_of(p) for p in compose)
    assert len(families) >= 10 and max(families.values()) <= 0.25 * len(compose)
    # the same problem as gen's under the new name: statement, code and tests
    gen = {pair_of(p): p for p in sets["gen"]}
    for p in compose[:20]:
        twin = gen[pair_of(p)]
        assert (p.prompt, p.helpers, p.main, p.tests) == (
            twin.prompt,
            twin.helpers,
            twin.main,
            twin.tests,
        )
    assert problem_from_dict(problem_to_dict(compose[0])) == compose[0]  # validation accepts it


def test_gen_unseen_balanced_draws_190_with_no_family_over_40_percent(sets):
    drawn = sets["gen_unseen_balanced"]
    assert len(drawn) == len({p.id for p in drawn}) == 190
    assert all(p.id.startswith("gen_unseen/") and p.source == "gen_unseen" for p in drawn)
    assert {p.id for p in drawn} <= {p.id for p in sets["gen_unseen"]}
    families = Counter(family_of(p) for p in drawn)
    assert len(families) == 5 and max(families.values()) <= 0.40 * 190


def test_gen_and_gen_unseen_stay_as_they_were(sets):
    assert sets["gen"] == generated_set("gen") and len(sets["gen"]) == 2149
    assert sets["gen_unseen"] == generated_set("gen_unseen") and len(sets["gen_unseen"]) == 456


def test_prepare_writes_the_comparison_sets(tmp_path, monkeypatch):
    sets = {
        "gen_train": {"n_train": 3, "n_test": 0},
        "gen_compose": {"n_train": 0, "n_test": 2},
        "gen_unseen_balanced": {"n_train": 0, "n_test": 2},
    }
    monkeypatch.chdir(tmp_path)
    prepare.run(parse_params({"prepare": {"sets": sets}}))
    read = {
        name: [json.loads(line) for line in (tmp_path / f"data/prepared/{name}.jsonl").open()]
        for name in ("train", "test")
    }
    assert Counter(heldout_set(row["id"]) for row in read["train"]) == {"gen": 3}
    assert Counter(heldout_set(row["id"]) for row in read["test"]) == {
        "gen_compose": 2,
        "gen_unseen": 2,
    }
    assert len([problem_from_dict(r) for rows in read.values() for r in rows]) == 7  # validated
    summary = json.loads((tmp_path / "data/prepared/summary.json").read_text())["sets"]
    assert summary["gen_compose"] == {"available": 240, "train": 0, "test": 2}
    assert summary["gen_unseen_balanced"] == {"available": 190, "train": 0, "test": 2}
