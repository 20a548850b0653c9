"""The paper's level reward for code collaboration (max 4.0 with the default weights).

    L1 structure   aux defined with a return            +0.4  (does not gate)
                   main entry point defined with return +0.6  (gates: stop here if missing)
    L2 syntax      the joined program parses            +0.5  (gates)
    L3 tests       fraction of asserts passed           0..1.0
    cooperation    >=1 test passes, aux exists and main calls aux        +0.5
                   ... and main is not a thin wrapper around aux          +1.0
                   aux is called but its value is ignored                 -0.5

With several helpers (N > 2 agents) the aux-structure and call terms are scaled by the fraction of helpers
that qualify, so one helper reproduces the paper exactly. `level_reward` is pure: it takes the code facts
(from `code_facts`) and the sandbox's test report; `score_joint_actions` runs the sandbox for many programs.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from orchestry.envs.code.problems import Problem
from orchestry.envs.code.sandbox.runner import SandboxJob, SandboxLimits, TestReport, run_many


@dataclass(frozen=True)
class RewardWeights:
    aux_defined: float = 0.4
    main_defined: float = 0.6
    syntax: float = 0.5
    tests: float = 1.0
    coop_call: float = 0.5
    coop_nontrivial: float = 1.0
    ignored_penalty: float = 0.5


@dataclass(frozen=True)
class HelperFacts:
    name: str
    defined: bool  # a function of that name with a `return <value>` exists in the helper's code
    called: bool  # main's function calls it (or passes it as a function value)
    ignored: bool  # called as a bare expression statement whose value is dropped


@dataclass(frozen=True)
class CodeFacts:
    helpers: tuple[HelperFacts, ...]
    main_defined: bool
    parses: bool  # the joined program compiles
    thin_wrapper: bool  # main's body is only `return aux(...)` or `x = aux(...); return x`


@dataclass(frozen=True)
class RewardBreakdown:
    structure: float
    syntax: float
    tests: float
    cooperation: float
    total: float
    pass_rate: float
    main_calls_aux: bool
    thin_wrapper: bool

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError):
        return None


def find_function(tree: ast.Module | None, name: str) -> ast.FunctionDef | None:
    """The last top-level `def name` in a module (the one Python would bind)."""
    if tree is None:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            found = node
    return found


def returns_value(func: ast.FunctionDef | None) -> bool:
    """True when the function has a `return <expr>` of its own (nested defs excluded)."""
    if func is None:
        return False
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def _body_without_docstring(func: ast.FunctionDef) -> list[ast.stmt]:
    body = list(func.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    return body


def _is_call_to(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def calls_function(func: ast.FunctionDef | None, name: str) -> bool:
    """Main uses `name`: calls it or passes it as a value (e.g. `key=aux`, `map(aux, xs)`)."""
    if func is None:
        return False
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        for node in ast.walk(func)
    )


def ignores_result(func: ast.FunctionDef | None, name: str) -> bool:
    """Some call `name(...)` is a bare statement, so its value is dropped."""
    if func is None:
        return False
    return any(isinstance(n, ast.Expr) and _is_call_to(n.value, name) for n in ast.walk(func))


def _forwards(node: ast.AST | None, names: Sequence[str]) -> bool:
    """A call of a helper whose arguments are only names or constants (inputs passed through)."""
    if not any(_is_call_to(node, n) for n in names):
        return False
    args = [*node.args, *(k.value for k in node.keywords)]  # type: ignore[union-attr]
    return all(isinstance(a, ast.Name | ast.Constant) for a in args)


def is_thin_wrapper(func: ast.FunctionDef | None, names: Sequence[str]) -> bool:
    """Main only forwards its inputs to a helper: `return aux(a, b)`, or `x = aux(a)` then `return x`.

    A call whose arguments are computed (`aux(aux(a, b), c)`, `aux(s.lower())`) is real work around
    the helper, not a wrapper (the same line the scheme classifier draws).
    """
    if func is None:
        return False
    body = _body_without_docstring(func)
    if len(body) == 1 and isinstance(body[0], ast.Return):
        return _forwards(body[0].value, names)
    if len(body) == 2 and isinstance(body[0], ast.Assign) and isinstance(body[1], ast.Return):
        (target,) = body[0].targets if len(body[0].targets) == 1 else (None,)
        ret = body[1].value
        return (
            isinstance(target, ast.Name)
            and _forwards(body[0].value, names)
            and isinstance(ret, ast.Name)
            and ret.id == target.id
        )
    return False


def joint_program(helper_codes: Sequence[str], main_code: str) -> str:
    """The program the tests run: helpers first, then main."""
    parts = [code.strip() for code in (*helper_codes, main_code) if code.strip()]
    return "\n\n\n".join(parts) + "\n"


def code_facts(
    helper_codes: Sequence[str], helper_names: Sequence[str], main_code: str, main_name: str
) -> CodeFacts:
    """Static facts about a joint action, from the AST alone."""
    main_fn = find_function(_parse(main_code), main_name)
    helpers = []
    for code, name in zip(helper_codes, helper_names, strict=True):
        fn = find_function(_parse(code), name)
        helpers.append(
            HelperFacts(
                name=name,
                defined=returns_value(fn),
                called=calls_function(main_fn, name),
                ignored=ignores_result(main_fn, name),
            )
        )
    return CodeFacts(
        helpers=tuple(helpers),
        main_defined=returns_value(main_fn),
        parses=_parse(joint_program(helper_codes, main_code)) is not None,
        thin_wrapper=is_thin_wrapper(main_fn, helper_names),
    )


def level_reward(facts: CodeFacts, report: TestReport | None, w: RewardWeights) -> RewardBreakdown:
    """The level reward of one joint action given its code facts and test report (None: not run)."""
    n_helpers = max(len(facts.helpers), 1)
    aux_share = sum(h.defined for h in facts.helpers) / n_helpers
    structure = w.aux_defined * aux_share
    syntax = tests = coop = pass_rate = 0.0
    calls_share = sum(h.defined and h.called for h in facts.helpers) / n_helpers
    if facts.main_defined:
        structure += w.main_defined
        if facts.parses:
            syntax = w.syntax
            if report is None:
                raise ValueError("a parsing program with a main must have a test report")
            pass_rate = report.pass_rate
            tests = w.tests * pass_rate
            if report.n_passed > 0 and calls_share > 0:
                coop += w.coop_call * calls_share
                if not facts.thin_wrapper:
                    coop += w.coop_nontrivial * calls_share
            if any(h.called and h.ignored for h in facts.helpers):
                coop -= w.ignored_penalty
    total = structure + syntax + tests + coop
    return RewardBreakdown(
        structure=structure,
        syntax=syntax,
        tests=tests,
        cooperation=coop,
        total=total,
        pass_rate=pass_rate,
        main_calls_aux=calls_share > 0,
        thin_wrapper=facts.thin_wrapper,
    )


@dataclass(frozen=True)
class JointAction:
    """The code each agent contributed to one joint program for one problem."""

    problem: Problem
    helper_codes: tuple[str, ...]
    main_code: str

    def facts(self) -> CodeFacts:
        return code_facts(
            self.helper_codes,
            [h.name for h in self.problem.helpers],
            self.main_code,
            self.problem.main.name,
        )

    def program(self) -> str:
        return joint_program(self.helper_codes, self.main_code)


def score_joint_actions(
    actions: Sequence[JointAction], w: RewardWeights, limits: SandboxLimits, workers: int
) -> list[tuple[RewardBreakdown, TestReport | None]]:
    """Reward many joint actions; programs that parse and define main run in the sandbox in parallel."""
    facts = [a.facts() for a in actions]
    to_run = [i for i, f in enumerate(facts) if f.main_defined and f.parses]
    jobs = [
        SandboxJob(
            program=actions[i].program(),
            tests=tuple(actions[i].problem.tests),
            setup=actions[i].problem.setup,
            entry_point=actions[i].problem.main.name,
        )
        for i in to_run
    ]
    reports: list[TestReport | None] = [None] * len(actions)
    for i, rep in zip(to_run, run_many(jobs, limits, workers), strict=True):
        reports[i] = rep
    return [(level_reward(f, r, w), r) for f, r in zip(facts, reports, strict=True)]
