"""Problem sets in one schema: the shipped cooperative sets (data/coop, data/coop3) and HumanEval.

A `Problem` names the functions a team of agents must write: one `FunctionSpec` per helper agent
(`aux` in the two-agent sets, `aux1`, `aux2`, ... in coop3) and the entry point `main` that the
tests call as `candidate`. Each test is a Python snippet that passes iff it runs without raising;
`setup` is trusted code run before the tests (imports, helper definitions the tests use).

Every `Problem` validates itself on construction, so a malformed data file fails at load time with
a message naming the file, the problem id and the field. This module loads the shipped sets from
their folders; HumanEval's conversion is `orchestry.envs.code.humaneval`.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from orchestry import io

SOURCES: tuple[str, ...] = ("coop", "humaneval", "coop3", "gen", "gen_unseen", "gen_compose")
"""Where a problem comes from; `gen`, `gen_unseen` and `gen_compose` (pairs of `gen`'s families held
out: generated/heldout.py) are the generated sets (envs/code/generated)."""
DIFFICULTIES: tuple[str, ...] = ("trivial", "easy", "medium", "hard")


@dataclass(frozen=True)
class FunctionSpec:
    """One function a team member must write."""

    name: str
    signature: str
    """The def line plus a short docstring (for HumanEval mains: the whole HumanEval prompt)."""
    reference: str
    """A complete reference implementation (a full def), or "" when none exists."""
    unit_tests: tuple[str, ...] = ()
    """Asserts on this function alone (helpers: derived from the reference run, `unit_tests.py`)."""


@dataclass(frozen=True)
class Problem:
    """A task for a team: helpers' functions, the entry point, and the tests of the entry point."""

    id: str
    source: str
    prompt: str
    helpers: tuple[FunctionSpec, ...]
    main: FunctionSpec
    tests: tuple[str, ...]
    setup: str = ""
    difficulty: str = "medium"

    def __post_init__(self) -> None:
        _validate_problem(self)

    @property
    def entry_point(self) -> str:
        """Name of the function the tests call as `candidate`."""
        return self.main.name

    def reference_program(self) -> str:
        """The helpers' references followed by the main reference, skipping empty ones."""
        parts = [spec.reference.strip("\n") for spec in (*self.helpers, self.main)]
        return "\n\n\n".join(part for part in parts if part) + "\n"


def difficulty_rank(problem: Problem) -> int:
    """A problem's grade as a number (0 = trivial ... 3 = hard), for `train.curriculum: by_grade`."""
    return DIFFICULTIES.index(problem.difficulty)


def _fail(problem_id: str, field: str, message: str) -> ValueError:
    return ValueError(f"problem {problem_id!r}: field {field!r}: {message}")


def _parses(code: str) -> str | None:
    """The syntax error message of `code`, or None when it parses."""
    try:
        ast.parse(code)
    except SyntaxError as err:
        return f"line {err.lineno}: {err.msg}"
    return None


def _defined_functions(code: str) -> set[str]:
    return {
        node.name
        for node in ast.parse(code).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def _validate_spec(problem_id: str, field: str, spec: FunctionSpec) -> None:
    if not isinstance(spec, FunctionSpec):
        raise _fail(problem_id, field, f"expected a FunctionSpec, got {type(spec).__name__}")
    if not spec.name.isidentifier():
        raise _fail(problem_id, f"{field}.name", f"{spec.name!r} is not a Python identifier")
    if f"def {spec.name}(" not in spec.signature:
        raise _fail(problem_id, f"{field}.signature", f"does not contain 'def {spec.name}('")
    if spec.reference:
        error = _parses(spec.reference)
        if error is not None:
            raise _fail(problem_id, f"{field}.reference", f"does not parse ({error})")
        if spec.name not in _defined_functions(spec.reference):
            raise _fail(problem_id, f"{field}.reference", f"does not define {spec.name}()")
    for i, test in enumerate(spec.unit_tests):
        error = _parses(test) if isinstance(test, str) and test.strip() else "empty"
        if error is not None:
            raise _fail(problem_id, f"{field}.unit_tests[{i}]", f"does not parse ({error})")


def _validate_problem(p: Problem) -> None:
    pid = p.id
    if not isinstance(pid, str) or not pid:
        raise ValueError(f"problem id must be a non-empty string, got {pid!r}")
    if p.source not in SOURCES:
        raise _fail(pid, "source", f"{p.source!r} is not one of {SOURCES}")
    if p.difficulty not in DIFFICULTIES:
        raise _fail(pid, "difficulty", f"{p.difficulty!r} is not one of {DIFFICULTIES}")
    if not p.prompt.strip():
        raise _fail(pid, "prompt", "is empty")
    if not isinstance(p.helpers, tuple) or not p.helpers:
        raise _fail(pid, "helpers", "must be a non-empty tuple of FunctionSpec")
    for i, spec in enumerate(p.helpers):
        _validate_spec(pid, f"helpers[{i}]", spec)
    _validate_spec(pid, "main", p.main)
    helper_names = [spec.name for spec in p.helpers]
    if p.source == "coop3":
        expected = [f"aux{i + 1}" for i in range(len(helper_names))]
        if len(helper_names) < 2 or helper_names != expected:
            message = f"coop3 needs helpers named aux1, aux2, ...; got {helper_names}"
            raise _fail(pid, "helpers", message)
    elif helper_names != ["aux"]:
        message = f"two-agent sets need exactly one helper 'aux'; got {helper_names}"
        raise _fail(pid, "helpers", message)
    if p.main.name in helper_names:
        raise _fail(pid, "main.name", f"{p.main.name!r} clashes with a helper name")
    if not isinstance(p.tests, tuple) or not p.tests:
        raise _fail(pid, "tests", "must be a non-empty tuple of snippets")
    for i, test in enumerate(p.tests):
        if not isinstance(test, str) or not test.strip():
            raise _fail(pid, f"tests[{i}]", "must be a non-empty string")
        error = _parses(test)
        if error is not None:
            raise _fail(pid, f"tests[{i}]", f"does not parse ({error})")
    error = _parses(p.setup)
    if error is not None:
        raise _fail(pid, "setup", f"does not parse ({error})")


# --- JSON-safe dictionaries ------------------------------------------------------------------

_SPEC_FIELDS = ("name", "signature", "reference")
_OPTIONAL_SPEC_FIELDS = ("unit_tests",)
_PROBLEM_FIELDS = ("id", "source", "prompt", "helpers", "main", "tests", "setup", "difficulty")
_OPTIONAL_FIELDS = {"setup": "", "difficulty": "medium"}


def _spec_to_dict(spec: FunctionSpec) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": spec.name,
        "signature": spec.signature,
        "reference": spec.reference,
    }
    if spec.unit_tests:
        d["unit_tests"] = list(spec.unit_tests)
    return d


def problem_to_dict(p: Problem) -> dict[str, Any]:
    """A JSON-safe dictionary (lists, strings) that `problem_from_dict` turns back into `p`."""
    return {
        "id": p.id,
        "source": p.source,
        "prompt": p.prompt,
        "helpers": [_spec_to_dict(spec) for spec in p.helpers],
        "main": _spec_to_dict(p.main),
        "tests": list(p.tests),
        "setup": p.setup,
        "difficulty": p.difficulty,
    }


def _string_field(d: Mapping[str, Any], key: str, problem_id: str, where: str) -> str:
    if key not in d:
        raise _fail(problem_id, where, "is missing")
    value = d[key]
    if not isinstance(value, str):
        raise _fail(problem_id, where, f"must be a string, got {type(value).__name__}")
    return value


def _spec_from_dict(d: Any, problem_id: str, where: str) -> FunctionSpec:
    if not isinstance(d, Mapping):
        raise _fail(problem_id, where, f"must be a mapping, got {type(d).__name__}")
    allowed = (*_SPEC_FIELDS, *_OPTIONAL_SPEC_FIELDS)
    unknown = sorted(set(d) - set(allowed))
    if unknown:
        raise _fail(problem_id, where, f"unknown keys {unknown}; expected {list(allowed)}")
    name, signature, reference = (
        _string_field(d, key, problem_id, f"{where}.{key}") for key in _SPEC_FIELDS
    )
    unit_tests = d.get("unit_tests", [])
    if not isinstance(unit_tests, list) or not all(isinstance(t, str) for t in unit_tests):
        raise _fail(problem_id, f"{where}.unit_tests", "must be a list of strings")
    return FunctionSpec(name, signature, reference, tuple(unit_tests))


def problem_from_dict(d: Mapping[str, Any]) -> Problem:
    """Build and validate a Problem; ValueError names the problem id and the missing/bad field."""
    if not isinstance(d, Mapping):
        raise ValueError(f"a problem must be a mapping, got {type(d).__name__}")
    raw_id = d.get("id")
    pid = raw_id if isinstance(raw_id, str) and raw_id else "<no id>"
    unknown = sorted(set(d) - set(_PROBLEM_FIELDS))
    if unknown:
        raise _fail(pid, "<top level>", f"unknown keys {unknown}; expected {list(_PROBLEM_FIELDS)}")
    missing = [key for key in _PROBLEM_FIELDS if key not in d and key not in _OPTIONAL_FIELDS]
    if missing:
        raise _fail(pid, missing[0], f"is missing (missing keys: {missing})")
    values = {**_OPTIONAL_FIELDS, **d}
    problem_id = _string_field(values, "id", pid, "id")
    helpers = values.get("helpers")
    if not isinstance(helpers, list | tuple) or not helpers:
        raise _fail(pid, "helpers", "must be a non-empty list of function specs")
    tests = values.get("tests")
    if not isinstance(tests, list | tuple) or not tests:
        raise _fail(pid, "tests", "must be a non-empty list of snippets")
    for i, test in enumerate(tests):
        if not isinstance(test, str):
            raise _fail(pid, f"tests[{i}]", f"must be a string, got {type(test).__name__}")
    return Problem(
        id=problem_id,
        source=_string_field(values, "source", pid, "source"),
        prompt=_string_field(values, "prompt", pid, "prompt"),
        helpers=tuple(_spec_from_dict(h, pid, f"helpers[{i}]") for i, h in enumerate(helpers)),
        main=_spec_from_dict(values.get("main"), pid, "main"),
        tests=tuple(tests),
        setup=_string_field(values, "setup", pid, "setup"),
        difficulty=_string_field(values, "difficulty", pid, "difficulty"),
    )


# --- The shipped cooperative sets ------------------------------------------------------------


def load_problem_dir(path: Path) -> list[Problem]:
    """Load every `*.yaml` file of a problem directory (one problem per file), sorted by file name.

    Each file holds the `problem_to_dict` fields; the id must be `<source>/<file stem>` and every
    helper and the main function need a reference implementation. Errors name the file.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"problem directory {path} does not exist")
    files = sorted(path.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(f"problem directory {path} holds no *.yaml files")
    problems = []
    for file in files:
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except yaml.YAMLError as err:
            raise ValueError(f"{file}: not valid YAML: {err}") from err
        try:
            problem = problem_from_dict(data)
        except ValueError as err:
            raise ValueError(f"{file}: {err}") from err
        expected_id = f"{problem.source}/{file.stem}"
        if problem.id != expected_id:
            raise ValueError(f"{file}: field 'id' is {problem.id!r}, expected {expected_id!r}")
        specs = {f"helpers[{i}]": h for i, h in enumerate(problem.helpers)} | {"main": problem.main}
        for field, spec in specs.items():
            if not spec.reference.strip():
                raise ValueError(f"{file}: field '{field}.reference' is empty")
        problems.append(problem)
    return problems


# --- Splits ----------------------------------------------------------------------------------


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


T = TypeVar("T", bound=_HasId)


def split_problems(
    problems: Sequence[T], n_train: int, n_test: int, seed: int
) -> tuple[list[T], list[T]]:
    """Disjoint (train, test) lists drawn by a seeded shuffle of the problems sorted by id (any
    environment's tasks: only their `id` is read).

    Deterministic for the same problems, sizes and seed (independent of input order and of
    PYTHONHASHSEED).
    """
    if n_train < 0 or n_test < 0:
        raise ValueError(f"n_train={n_train} and n_test={n_test} must not be negative")
    if n_train + n_test > len(problems):
        raise ValueError(
            f"n_train={n_train} + n_test={n_test} = {n_train + n_test} exceeds the "
            f"{len(problems)} problems available"
        )
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"duplicate problem ids: {duplicates}")
    ordered = sorted(problems, key=lambda p: p.id)
    random.Random(seed).shuffle(ordered)
    return ordered[:n_train], ordered[n_train : n_train + n_test]


def read_problems(path: Path) -> list[Problem]:
    """A prepared split (JSONL of problems) as written by the `prepare` stage."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing; run the prepare stage first (dvc repro prepare)"
        )
    return [problem_from_dict(d) for d in io.read_jsonl(path)]
