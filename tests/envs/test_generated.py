"""The procedural problem generator (envs/code/generated) and its sets in the prepare stage."""

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import limits
from xdist_marks import one_process

from orchestry.envs.code.aux_use import analyse_aux_use
from orchestry.envs.code.generated import (
    GEN_SETS,
    HELD_OUT_FAMILIES,
    TRAINED_FAMILIES,
    generate_problems,
    generated_set,
)
from orchestry.envs.code.generated.catalogue import FAMILIES, PRIMITIVES
from orchestry.envs.code.generated.generator import build_problem, pairs
from orchestry.envs.code.humaneval import load_humaneval, paper_split
from orchestry.envs.code.problems import (
    DIFFICULTIES,
    Problem,
    problem_from_dict,
    problem_to_dict,
)
from orchestry.envs.code.sandbox import SandboxJob, run_many
from orchestry.params import ParamsError, parse_params
from orchestry.params.env_schema import PrepareParams
from orchestry.stages import prepare

pytestmark = one_process(__name__)

ROOT = Path(__file__).resolve().parents[2]
PRIMITIVE = {p.name: p for p in PRIMITIVES}
FAMILY = {f.name: f for f in FAMILIES}


@pytest.fixture(scope="module")
def generated():
    return generate_problems()


@pytest.fixture(scope="module")
def sets(generated) -> dict[str, list[Problem]]:
    return {name: generated_set(name) for name in GEN_SETS}


def _parts(p: Problem) -> tuple[str, tuple[str, ...]]:
    """(family, primitive names) from the id `<set>/<family>/<aux>[+<step>]`."""
    _, family, primitives = p.id.split("/")
    return family, tuple(primitives.split("+"))


def _sample(problems: list[Problem], n: int, seed: int = 0) -> list[Problem]:
    return random.Random(seed).sample(problems, n)


# --- The generated sets ----------------------------------------------------------------------


def test_thousands_of_problems_unique_ids_every_pair_at_most_once(generated, sets):
    assert len(sets["gen"]) >= 2100  # docs: gen {n_train: 2000, n_test: 100}
    assert len(sets["gen_unseen"]) >= 200  # docs: gen_unseen {n_train: 0, n_test: 200}
    problems = generated.problems
    assert len(problems) == len(sets["gen"]) + len(sets["gen_unseen"])
    ids = [p.id for p in problems]
    assert len(set(ids)) == len(ids)
    keys = [_parts(p) for p in problems]
    assert len(set(keys)) == len(keys)
    for p, (family, names) in zip(problems, keys, strict=True):
        assert p.id == f"{p.source}/{family}/{'+'.join(names)}"
        assert FAMILY[family].takes(tuple(PRIMITIVE[n] for n in names)), p.id


def test_every_pair_is_emitted_or_counted_as_dropped(generated):
    assert len(generated.problems) + sum(generated.dropped.values()) == len(pairs())
    # a reference that raises is a bug in a family or a primitive, not a weak test
    assert not [reason for reason in generated.dropped if reason.startswith("reference")]


def test_the_params_description_and_the_docs_state_the_set_sizes(sets):
    description = PrepareParams.model_fields["sets"].description
    page = (ROOT / "docs/generated_problems.md").read_text()
    for name, problems in sets.items():
        assert f"`{name}` {len(problems)} " in description, (name, len(problems))
        grades = Counter(p.difficulty for p in problems)
        row = " | ".join(str(grades[g]) for g in DIFFICULTIES)
        assert f"| `{name}` | {len(problems)} | {row} |" in page, (name, len(problems), row)


def test_difficulty_recorded_and_all_grades_present(sets):
    grades = Counter(p.difficulty for p in sets["gen"])
    assert set(grades) == set(DIFFICULTIES), grades
    assert all(p.difficulty in DIFFICULTIES for p in sets["gen_unseen"])
    # the grade follows the composition: one plain pass over one primitive is trivial
    by_id = {p.id: p for p in sets["gen"]}
    assert by_id["gen/count/is_even"].difficulty == "trivial"
    assert by_id["gen/window/add"].difficulty == "hard"


def test_held_out_families_form_gen_unseen_only(sets):
    assert set(HELD_OUT_FAMILIES) | set(TRAINED_FAMILIES) == set(FAMILY)
    assert not set(HELD_OUT_FAMILIES) & set(TRAINED_FAMILIES)
    assert len(FAMILY) >= 10
    assert {_parts(p)[0] for p in sets["gen_unseen"]} == set(HELD_OUT_FAMILIES)
    assert {_parts(p)[0] for p in sets["gen"]} == set(TRAINED_FAMILIES)
    assert {p.source for p in sets["gen"]} == {"gen"}
    assert {p.source for p in sets["gen_unseen"]} == {"gen_unseen"}


def test_problem_shape(generated):
    for p in generated.problems:
        assert 5 <= len(p.tests) <= 8, p.id
        assert all(t.startswith("assert candidate(") for t in p.tests), p.id
        assert [h.name for h in p.helpers] == ["aux"], p.id
        assert p.main.reference.startswith(p.main.signature), p.id
        assert f"Example: {p.main.name}(" in p.main.signature, p.id
        assert "aux(" in p.prompt and f"{p.main.name}(" in p.prompt, p.id


def test_main_references_use_aux_as_the_reward_reads_it(generated):
    for p in _sample(list(generated.problems), 400):
        use = analyse_aux_use(p.helpers[0].reference, p.main.reference, main_name=p.main.name)
        assert use.outcome == "uses", (p.id, use.outcome)


def test_round_trip_through_json(generated):
    for p in _sample(list(generated.problems), 200):
        assert problem_from_dict(json.loads(json.dumps(problem_to_dict(p)))) == p


# --- Determinism -----------------------------------------------------------------------------


def test_same_seed_same_problems_other_seed_other_tests(generated):
    sample = _sample(list(generated.problems), 60)
    again = [
        build_problem(FAMILY[f], tuple(PRIMITIVE[n] for n in ns), 0)
        for f, ns in map(_parts, sample)
    ]
    assert again == sample
    other = [
        build_problem(FAMILY[f], tuple(PRIMITIVE[n] for n in ns), 1)
        for f, ns in map(_parts, sample[:20])
    ]
    assert sum(o.tests != p.tests for o, p in zip(other, sample[:20], strict=True)) >= 15


def test_generation_does_not_depend_on_the_hash_seed():
    code = (
        "import hashlib, json\n"
        "from orchestry.envs.code.generated.generator import Dropped, build_problem, pairs\n"
        "from orchestry.envs.code.problems import problem_to_dict\n"
        "rows = []\n"
        "for family, primitives in pairs()[::40]:\n"
        "    try:\n"
        "        rows.append(problem_to_dict(build_problem(family, primitives, 0)))\n"
        "    except Dropped as why:\n"
        "        rows.append(str(why))\n"
        "print(len(rows), hashlib.sha256(json.dumps(rows).encode()).hexdigest())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in ("1", "2")
    }
    assert len(outputs) == 1, outputs


# --- The real sandbox ------------------------------------------------------------------------


def test_references_pass_and_wrong_helpers_fail_in_the_sandbox(generated):
    sample = _sample(list(generated.problems), 20, seed=1)
    wrong = [
        PRIMITIVE[_parts(p)[1][0]].source(wrong=True) + "\n\n" + p.main.reference for p in sample
    ]
    jobs = [
        SandboxJob(program=program, tests=p.tests, setup=p.setup, entry_point=p.entry_point)
        for p, program in zip(
            sample + sample, [p.reference_program() for p in sample] + wrong, strict=True
        )
    ]
    reports = run_many(jobs, limits(), workers=2)
    good, bad = reports[: len(sample)], reports[len(sample) :]
    assert {
        p.id: r.first_failure for p, r in zip(sample, good, strict=True) if r.pass_rate < 1
    } == {}
    assert [p.id for p, r in zip(sample, bad, strict=True) if r.pass_rate == 1.0] == []


# --- The prepare stage -----------------------------------------------------------------------


def test_gen_split_shares_no_pair_and_gen_unseen_no_family(sets):
    train, test = prepare.split_set("gen", sets["gen"], 2000, 100, seed=0)
    assert not {_parts(p) for p in train} & {_parts(p) for p in test}
    _, unseen = prepare.split_set("gen_unseen", sets["gen_unseen"], 0, 200, seed=0)
    assert len(unseen) == 200
    assert not {_parts(p)[0] for p in train} & {_parts(p)[0] for p in unseen}


def test_humaneval_paper_split_is_fixed_by_index():
    problems = load_humaneval()
    train, test = paper_split(problems, 130, 32)
    assert [p.id for p in train] == [f"humaneval/HumanEval/{i}" for i in range(33, 163)]
    assert [p.id for p in test] == [f"humaneval/HumanEval/{i}" for i in range(32)]
    assert paper_split(list(reversed(problems)), 3, 2) == (train[:3], test[:2])
    with pytest.raises(ValueError, match=r"humaneval_paper\.n_train=131"):
        paper_split(problems, 131, 0)
    with pytest.raises(ValueError, match=r"humaneval_paper\.n_test=33"):
        paper_split(problems, 0, 33)


def test_prepare_writes_the_generated_and_paper_sets(tmp_path, monkeypatch):
    params = parse_params(
        {
            "prepare": {
                "sets": {
                    "gen": {"n_train": 4, "n_test": 2},
                    "gen_unseen": {"n_train": 0, "n_test": 3},
                    "humaneval_paper": {"n_train": 2, "n_test": 1},
                }
            }
        }
    )
    monkeypatch.chdir(tmp_path)
    prepare.run(params)
    read = {
        name: [json.loads(line) for line in (tmp_path / f"data/prepared/{name}.jsonl").open()]
        for name in ("train", "test")
    }
    sources = {name: Counter(row["source"] for row in rows) for name, rows in read.items()}
    assert sources == {
        "train": {"gen": 4, "humaneval": 2},
        "test": {"gen": 2, "gen_unseen": 3, "humaneval": 1},
    }
    humaneval = {
        name: [row["id"] for row in rows if row["source"] == "humaneval"]
        for name, rows in read.items()
    }
    assert humaneval == {
        "train": ["humaneval/HumanEval/33", "humaneval/HumanEval/34"],
        "test": ["humaneval/HumanEval/0"],
    }
    generated_rows = [row for rows in read.values() for row in rows if row["source"] != "humaneval"]
    assert all(row["helpers"][0]["unit_tests"] for row in generated_rows)  # derived in the sandbox
    summary = json.loads((tmp_path / "data/prepared/summary.json").read_text())["sets"]
    available = len(generated_set("gen_unseen"))
    assert summary["gen_unseen"] == {"available": available, "train": 0, "test": 3}
    assert summary["humaneval_paper"] == {"available": 164, "train": 2, "test": 1}


def test_split_seed_fixes_the_split_whatever_the_training_seed(tmp_path, monkeypatch):
    """`prepare.split_seed` draws the split in place of `seed`, so runs of several training seeds
    answer the same held-out problems; unset, `seed` draws it as before."""
    monkeypatch.chdir(tmp_path)

    def test_ids(seed: int, **prepare_keys) -> list[str]:
        sets = {"gen_unseen": {"n_train": 0, "n_test": 3}}
        prepare.run(parse_params({"seed": seed, "prepare": {"sets": sets, **prepare_keys}}))
        rows = (tmp_path / "data/prepared/test.jsonl").read_text().splitlines()
        return [json.loads(line)["id"] for line in rows]

    seed0 = test_ids(0)
    assert test_ids(1, split_seed=0) == seed0
    assert json.loads((tmp_path / "data/prepared/summary.json").read_text())["seed"] == 0
    assert test_ids(1) != seed0


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        ({"gen_unseen": {"n_train": 5, "n_test": 10}}, "prepare.sets.gen_unseen.n_train must be 0"),
        (
            {
                "humaneval": {"n_train": 1, "n_test": 0},
                "humaneval_paper": {"n_train": 0, "n_test": 1},
            },
            "humaneval and humaneval_paper",
        ),
    ],
)
def test_params_errors_name_the_key(sets, needle):
    with pytest.raises(ParamsError) as err:
        parse_params({"prepare": {"sets": sets}})
    assert needle in str(err.value) and "\n" not in str(err.value)
    parse_params({"prepare": {"sets": {"gen_unseen": {"n_train": 0, "n_test": 10}}}})
