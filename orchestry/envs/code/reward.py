"""The paper's level reward for code collaboration (max 4.0 with the default weights).

    L1 structure   aux defined with a return            +0.4  (does not gate)
                   main entry point defined with return +0.6  (gates: stop here if missing)
    L2 syntax      the joined program parses            +0.5  (gates)
    L3 tests       fraction of asserts passed           0..1.0
    cooperation    >=1 test passes, aux exists and main calls aux        +0.5
                   ... and main is not a thin wrapper around aux          +1.0
                   (`coop_gate`: paid once one test passes, the paper; or
                   times the fraction passed; or only when all pass)
                   aux is called but its value is ignored                 -0.5

"Main calls aux", "thin wrapper" and "value ignored" are not decided here: they are the outcome of
`orchestry.envs.code.aux_use.analyse_aux_use` for each helper, the same definition the
cooperation-scheme classifier (`orchestry.analysis.schemes`) is built on, so what is rewarded and
what is measured agree. Per helper h (defined with a `return <value>`):

    called       the outcome is `thin_wrapper` or `uses`  (main calls aux and uses its value;
                 aliases, wrappers and `key=aux` count, dead code and shadowed names do not)
    non-trivial  the outcome is `uses`  (the classifier then labels a scheme: fallback, decorator,
                 coordinator or strategy filter)
    ignored      the outcome is `ignored_result`  (called, value never used; not called above)

The call bonus is coop_call x (share of helpers called), the non-trivial bonus coop_nontrivial x
(share of helpers non-trivial), and the penalty applies once when any helper is ignored; with one
helper (N = 2 agents) this is the paper's rule. The aux-structure term is scaled by the share of
helpers defined. `level_reward` is pure: it takes the code facts (from `code_facts`) and the
sandbox's test report; `score_joint_actions` runs the sandbox for many programs.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from orchestry.envs.code.aux_use import USES, analyse_aux_use
from orchestry.envs.code.live_code import find_function
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.sandbox import SandboxJob, SandboxLimits, TestReport, run_many
from orchestry.envs.code.syntax import parse_program


@dataclass(frozen=True)
class RewardWeights:
    """The level reward's weights (values: params `reward`, the one home of their defaults)."""

    aux_defined: float
    main_defined: float
    syntax: float
    tests: float
    coop_call: float
    coop_nontrivial: float
    ignored_penalty: float
    coop_gate: str  # "any" (the paper), "scaled" or "all": see `cooperation_gate`


def cooperation_gate(gate: str, report: TestReport) -> float:
    """The share of the cooperation bonus a program's test report earns: the paper pays all of it
    once one test passes (`any`); `scaled` pays the fraction of tests passed; `all` pays it only
    when every test passes. The penalty for an ignored helper is not gated."""
    if report.n_passed == 0:
        return 0.0
    if gate == "any":
        return 1.0
    if gate == "scaled":
        return report.pass_rate
    if gate == "all":
        return float(report.pass_rate == 1.0)
    raise ValueError(f"reward.coop_gate: {gate!r} is not any, scaled or all")


@dataclass(frozen=True)
class HelperFacts:
    name: str
    defined: bool  # a function of that name with a `return <value>` exists in the helper's code
    main_use: str  # how main uses it: one of `aux_use.OUTCOMES`

    @property
    def called(self) -> bool:
        """Main calls it and uses the value (a thin wrapper included)."""
        return self.defined and self.main_use in ("thin_wrapper", USES)

    @property
    def nontrivial(self) -> bool:
        """Main uses its value beyond a thin wrapper."""
        return self.defined and self.main_use == USES

    @property
    def ignored(self) -> bool:
        """Main calls it but never uses the value."""
        return self.main_use == "ignored_result"


@dataclass(frozen=True)
class CodeFacts:
    helpers: tuple[HelperFacts, ...]
    main_defined: bool
    parses: bool  # the joined program compiles

    @property
    def thin_wrapper(self) -> bool:
        """Some helper is called only through a thin wrapper, and none is used non-trivially."""
        return any(h.called for h in self.helpers) and not any(h.nontrivial for h in self.helpers)


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
        return parse_program(code)
    except (SyntaxError, ValueError):
        return None


def returns_value(func: ast.FunctionDef | ast.AsyncFunctionDef | None) -> bool:
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


def joint_program(helper_codes: Sequence[str], main_code: str) -> str:
    """The program the tests run: helpers first, then main."""
    parts = [code.strip() for code in (*helper_codes, main_code) if code.strip()]
    return "\n\n\n".join(parts) + "\n"


def code_facts(
    helper_codes: Sequence[str], helper_names: Sequence[str], main_code: str, main_name: str
) -> CodeFacts:
    """Static facts about a joint action, from the AST alone (cooperation from `aux_use`)."""
    helpers = tuple(
        HelperFacts(
            name=name,
            defined=returns_value(find_function(_parse(code), name)),
            main_use=analyse_aux_use(code, main_code, name, main_name).outcome,
        )
        for code, name in zip(helper_codes, helper_names, strict=True)
    )
    return CodeFacts(
        helpers=helpers,
        main_defined=returns_value(find_function(_parse(main_code), main_name)),
        parses=_parse(joint_program(helper_codes, main_code)) is not None,
    )


Scored = tuple[RewardBreakdown, TestReport | None]
"""A joint action's reward and its sandbox report (None when its program did not run)."""


def level_reward(facts: CodeFacts, report: TestReport | None, w: RewardWeights) -> RewardBreakdown:
    """The level reward of one joint action given its code facts and test report (None: not run)."""
    n_helpers = max(len(facts.helpers), 1)
    aux_share = sum(h.defined for h in facts.helpers) / n_helpers
    structure = w.aux_defined * aux_share
    syntax = tests = coop = pass_rate = 0.0
    calls_share = sum(h.called for h in facts.helpers) / n_helpers
    nontrivial_share = sum(h.nontrivial for h in facts.helpers) / n_helpers
    if facts.main_defined:
        structure += w.main_defined
        if facts.parses:
            syntax = w.syntax
            if report is None:
                raise ValueError("a parsing program with a main must have a test report")
            pass_rate = report.pass_rate
            tests = w.tests * pass_rate
            paid = cooperation_gate(w.coop_gate, report)
            coop += paid * (w.coop_call * calls_share + w.coop_nontrivial * nontrivial_share)
            if any(h.ignored for h in facts.helpers):
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
        """The AST facts, worked out once per distinct action (the reward, the env's outcome and
        the role checks all ask for them)."""
        names = tuple(h.name for h in self.problem.helpers)
        return _cached_facts(self.helper_codes, names, self.main_code, self.problem.main.name)

    def program(self) -> str:
        return joint_program(self.helper_codes, self.main_code)


@functools.lru_cache(maxsize=4096)
def _cached_facts(
    helper_codes: tuple[str, ...], helper_names: tuple[str, ...], main_code: str, main_name: str
) -> CodeFacts:
    return code_facts(helper_codes, helper_names, main_code, main_name)


def score_joint_actions(
    actions: Sequence[JointAction], w: RewardWeights, limits: SandboxLimits, workers: int
) -> list[tuple[RewardBreakdown, TestReport | None]]:
    """Reward many joint actions; programs that parse and define main run in the sandbox in parallel."""
    jobs, finish = plan_rewards(actions, w)
    return finish(run_many(jobs, limits, workers))


def plan_rewards(
    actions: Sequence[JointAction], w: RewardWeights
) -> tuple[list[SandboxJob], Callable[[Sequence[TestReport]], list[Scored]]]:
    """(the sandbox jobs the rewards need, `finish(their reports) -> rewards`), so that the caller
    can run them in one batch with other jobs (`CodeEnv.score` adds the role checks')."""
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

    def finish(run: Sequence[TestReport]) -> list[Scored]:
        reports: list[TestReport | None] = [None] * len(actions)
        for i, rep in zip(to_run, run, strict=True):
            reports[i] = rep
        return [(level_reward(f, r, w), r) for f, r in zip(facts, reports, strict=True)]

    return jobs, finish
