"""Generate the problems: every (family, primitives) pair once, with tests made by running the
reference, each problem checked before it is emitted.

For each pair a family takes (catalogue.py), in a fixed order:

1. the family composes main; the reference program is aux's reference then main's reference;
2. candidate inputs: the shapes' edge cases, then random ones from `random.Random(f"{seed}/{id}")`;
   the expected value of each is the reference's answer (run here, in this process: the programs
   are our own source, generated and trusted, never model output);
3. tests: at least one input that tells each *mutant* from the reference (aux's wrong variant,
   aux always answering one constant, main's step's wrong variant), edge cases, then inputs with
   answers not seen yet: 5 to 8 `assert candidate(<args>) == <expected>` snippets;
4. checks, each on the final snippets: the reference passes all of them; every mutant fails at
   least one; the answers are not all equal and not all the input itself. A pair that fails a
   check is dropped and counted under its reason, never emitted.

Difficulty comes from the composition: score = the family's depth (0-2) + (primitives - 1) +
(main's arguments - 1), graded trivial / easy / medium / hard for 0 / 1 / 2 / 3 or more.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Any

from orchestry.envs.code.generated.catalogue import FAMILIES, GEN_SETS, PRIMITIVES, set_of_family
from orchestry.envs.code.generated.family import (
    Composition,
    Family,
    describe_helper,
    describe_main,
    render_main,
)
from orchestry.envs.code.generated.primitive import Primitive
from orchestry.envs.code.problems import DIFFICULTIES, FunctionSpec, Problem

GENERATOR_SEED = 0
"""The seed of the sets the prepare stage reads (fixed, like a data file: `seed` in params.yaml
draws the train/test split, not the problems)."""
MIN_TESTS, TARGET_TESTS, MAX_TESTS = 5, 6, 8
EDGE_TESTS = 3
"""Edge-case inputs kept per problem, at most."""
RANDOM_INPUTS = 32
"""Random candidate inputs per problem (beside the edge cases)."""
MAX_TEST_CHARS = 160
"""Longest test snippet kept (a test should be read at a glance)."""
_DULL = (None, [], {}, "", 0, False)  # answers that make a poor example


class Dropped(Exception):
    """A (family, primitives) pair that fails a check; the message is the reason counted."""


@dataclass(frozen=True)
class Generated:
    """The problems generated at one seed, and how many pairs each check dropped."""

    seed: int
    problems: tuple[Problem, ...]
    dropped: Mapping[str, int]
    """Reason -> number of (family, primitives) pairs dropped for it."""


@dataclass(frozen=True, eq=False)
class _Row:
    """One candidate input: its arguments, the reference's answer and its test snippet."""

    args: tuple[Any, ...]
    expected: Any
    test: str
    edge: bool


def pairs() -> list[tuple[Family, tuple[Primitive, ...]]]:
    """Every (family, primitives) pair the families take, in the catalogue's order."""
    out: list[tuple[Family, tuple[Primitive, ...]]] = []
    for family in FAMILIES:
        choices: list[tuple[Primitive, ...]] = [()]
        for _ in family.slots:
            choices = [(*chosen, p) for chosen in choices for p in PRIMITIVES]
        out += [(family, prims) for prims in choices if family.takes(prims)]
    return out


def problem_id(family: Family, primitives: tuple[Primitive, ...]) -> str:
    """`<set>/<family>/<aux primitive>[+<main's step>]`: the set name is the problem's source."""
    return f"{set_of_family(family.name)}/{family.name}/{'+'.join(p.name for p in primitives)}"


def difficulty(family: Family, primitives: tuple[Primitive, ...], comp: Composition) -> str:
    """The grade of a composition (the module docstring gives the score)."""
    score = family.depth + (len(primitives) - 1) + (len(comp.params) - 1)
    return DIFFICULTIES[min(score, len(DIFFICULTIES) - 1)]


@functools.cache
def _compiled(source: str) -> CodeType:
    """The code of one def (helpers recur across thousands of problems: each compiles once)."""
    return compile(source, "<generated>", "exec")


def _load(name: str, *sources: str) -> Callable[..., Any]:
    """Function `name` of the program made of `sources` (our own generated defs), in order."""
    namespace: dict[str, Any] = {"__name__": "generated"}
    for source in sources:
        exec(_compiled(source), namespace)  # our own generated source, never model output
    return namespace[name]


def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    # arguments are flat: lists of ints or strings, or ints and strings (inputs.py)
    return fn(*(list(a) if isinstance(a, list) else a for a in args))


def _differs(fn: Callable[..., Any], args: tuple[Any, ...], expected: Any) -> bool:
    try:
        return not _call(fn, args) == expected
    except Exception:  # a mutant that raises on this input is told apart by it
        return True


def _passes(fn: Callable[..., Any], test: CodeType) -> bool:
    try:
        exec(test, {"candidate": fn})  # a test snippet we generated, on our own program
    except Exception:  # the assert failing, or the program raising: the test fails
        return False
    return True


def _mutants(aux: Primitive, main: str, wrong_step_main: str | None) -> dict[str, tuple[str, ...]]:
    """Programs that must fail at least one test: label -> the program's defs."""
    constants = (
        ("True", "False") if aux.kind == "predicate" else ({"int": "0", "str": '""'}[aux.out_type],)
    )
    out = {"wrong aux": (aux.source(wrong=True), main)}
    for value in constants:
        out[f"aux always {value}"] = (f"def aux(*args):\n    return {value}\n", main)
    if wrong_step_main is not None:
        out["wrong step"] = (aux.source(), wrong_step_main)
    return out


def _candidates(comp: Composition, rng: random.Random) -> list[tuple[tuple[Any, ...], bool]]:
    """(arguments, is an edge case): the parameters' edge cases in turn (the first of each, then
    the second of each, ...), the other arguments random; then random arguments; each only once."""
    found: list[tuple[tuple[Any, ...], bool]] = []
    for rank in range(max(len(p.shape.edges) for p in comp.params)):
        for i, param in enumerate(comp.params):
            if rank < len(param.shape.edges):
                edge = param.shape.edges[rank]
                args = tuple(
                    edge if j == i else p.shape.make(rng) for j, p in enumerate(comp.params)
                )
                found.append((args, True))
    for _ in range(RANDOM_INPUTS):
        found.append((tuple(p.shape.make(rng) for p in comp.params), False))
    seen: set[str] = set()
    unique = []
    for args, edge in found:
        if repr(args) not in seen:
            seen.add(repr(args))
            unique.append((args, edge))
    return unique


def _rows(comp: Composition, reference: Callable[..., Any], rng: random.Random) -> list[_Row]:
    rows = []
    for args, edge in _candidates(comp, rng):
        try:
            expected = _call(reference, args)
        except Exception as err:  # a bug in a family or primitive: counted, never emitted
            raise Dropped(f"reference raised {type(err).__name__}") from err
        test = f"assert candidate({', '.join(repr(a) for a in args)}) == {expected!r}"
        if len(test) <= MAX_TEST_CHARS:
            rows.append(_Row(args, expected, test, edge))
    return rows


def _choose(rows: list[_Row], mutants: Mapping[str, Callable[..., Any]]) -> list[_Row]:
    """The tests: a killer per mutant, edge cases, then new answers; in candidate order."""
    chosen: list[int] = []
    for label, mutant in mutants.items():
        if not any(_differs(mutant, rows[i].args, rows[i].expected) for i in chosen):
            killer = next(
                (i for i, row in enumerate(rows) if _differs(mutant, row.args, row.expected)),
                None,
            )
            if killer is None:
                raise Dropped(f"no input tells {label} apart")
            chosen.append(killer)
    answers = {repr(rows[i].expected) for i in chosen}
    edges = sum(rows[i].edge for i in chosen)
    for pass_new_only in (True, False):
        for i, row in enumerate(rows):
            full = len(chosen) >= TARGET_TESTS or (row.edge and edges >= EDGE_TESTS)
            if full or i in chosen or (pass_new_only and repr(row.expected) in answers):
                continue
            chosen.append(i)
            answers.add(repr(row.expected))
            edges += row.edge
    if len(chosen) < MIN_TESTS:
        raise Dropped("too few inputs")
    return [rows[i] for i in sorted(chosen)[:MAX_TESTS]]


def _example(comp: Composition, rows: list[_Row], tests: list[_Row]) -> str:
    """A worked example for main's docstring: an input not among the tests, with a lively answer."""
    rest = [row for row in rows if all(row is not test for test in tests)] or tests
    lively = [row for row in rest if not row.edge and row.expected not in _DULL]
    row = (lively or rest)[0]
    return f"{comp.name}({', '.join(repr(a) for a in row.args)}) == {row.expected!r}"


def build_problem(family: Family, primitives: tuple[Primitive, ...], seed: int) -> Problem:
    """One checked problem; raises Dropped with the reason when a check fails."""
    pid = problem_id(family, primitives)
    aux, step = primitives[0], (primitives[1] if len(primitives) > 1 else None)
    comp = family.compose(*primitives)
    _, bare_main = render_main(comp, None, step)
    wrong_step_main = None if step is None else render_main(comp, None, step, wrong_step=True)[1]
    mutant_programs = _mutants(aux, bare_main, wrong_step_main)
    reference = _load(comp.name, aux.source(), bare_main)
    mutants = {label: _load(comp.name, *defs) for label, defs in mutant_programs.items()}
    rows = _rows(comp, reference, random.Random(f"{seed}/{pid}"))
    tests = _choose(rows, mutants)
    if len({repr(row.expected) for row in tests}) < 2:
        raise Dropped("the same answer for every test")
    if all(row.expected == row.args[0] for row in tests):
        raise Dropped("the answer is the input for every test")
    signature, main_reference = render_main(comp, _example(comp, rows, tests), step)
    problem = Problem(
        id=pid,
        source=set_of_family(family.name),
        prompt="\n".join((comp.task, describe_helper(aux), describe_main(comp))),
        helpers=(FunctionSpec("aux", aux.signature(), aux.source()),),
        main=FunctionSpec(comp.name, signature, main_reference),
        tests=tuple(row.test for row in tests),
        difficulty=difficulty(family, primitives, comp),
    )
    _check(problem, mutant_programs)
    return problem


def _check(problem: Problem, mutant_programs: Mapping[str, tuple[str, ...]]) -> None:
    """The emitted snippets themselves: the reference passes all, every mutant fails one."""
    compiled = [compile(test, "<test>", "exec") for test in problem.tests]
    reference = _load(problem.main.name, problem.reference_program())
    if not all(_passes(reference, test) for test in compiled):
        raise Dropped("the reference fails its tests")
    for label, defs in mutant_programs.items():
        mutant = _load(problem.main.name, *defs)
        if all(_passes(mutant, test) for test in compiled):
            raise Dropped(f"{label} passes every test")


@functools.cache
def generate_problems(seed: int = GENERATOR_SEED) -> Generated:
    """Every checked problem of every (family, primitives) pair at `seed`, in catalogue order."""
    problems: list[Problem] = []
    dropped: Counter[str] = Counter()
    for family, primitives in pairs():
        try:
            problems.append(build_problem(family, primitives, seed))
        except Dropped as why:
            dropped[str(why)] += 1
    return Generated(seed, tuple(problems), dict(sorted(dropped.items())))


def generated_set(name: str, seed: int = GENERATOR_SEED) -> list[Problem]:
    """The problems of one task set: `gen` (trained families) or `gen_unseen` (held out)."""
    if name not in GEN_SETS:
        raise ValueError(f"unknown generated set {name!r}; sets are {', '.join(GEN_SETS)}")
    return [p for p in generate_problems(seed).problems if p.source == name]
