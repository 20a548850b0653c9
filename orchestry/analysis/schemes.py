"""Cooperation schemes between a helper function `aux` and a main function, read from the AST.

MAGRPO (arXiv 2508.04652) reports that trained agents settle into recognisable ways of working
together: fallback, decorator, coordinator and strategy filter. Each
(aux, main) pair is classified from its code alone; the names of aux and main always come from the
problem (arguments), never from guessing at names such as "helper".

Schemes (cooperation):

- ``fallback`` -- main calls aux and falls back to its own logic when aux fails or returns an
  unusable value: the call sits in a ``try`` whose handler does more than re-raise, or aux's
  result is checked for validity (``is None``, truthiness, ``isinstance``, ``len(r) == 0``, a
  sentinel such as ``-1``) and is also used as a value, or main writes ``aux(x) or default``
  (a check whose only branch raises, or an ``assert``, validates instead: decorator)::

      def main(x):
          try:
              return aux(x)
          except ValueError:
              return x * 2

- ``decorator`` -- main calls aux once (not in a loop) and pre-processes its inputs (an argument
  that is not one of main's parameters passed unchanged, or an early-return guard on the inputs
  before the call) and/or post-processes its result (the value feeds a larger expression); it is
  also the label of any other use of aux's value that no scheme below describes::

      def main(s):
          return aux(s.strip()).upper()

- ``coordinator`` -- main decomposes the task and calls aux several times: in a loop or
  comprehension, through ``map``/``functools.reduce``, or on different arguments in calls that can
  run on the same path (not in exclusive branches, not ``aux(aux(x))``), and combines the
  results; a call in a loop whose value is only tested is a strategy filter instead::

      def main(xs):
          return sum(aux(x) for x in xs)

- ``strategy_filter`` -- aux's result decides what main does: aux is called in a condition, used
  as a predicate or key (``filter(aux, xs)``, ``sorted(xs, key=aux)``, ``if aux(x): ... else:``),
  selects an entry (``table[aux(x)]``), or its stored result is only ever tested::

      def main(xs):
          return [x for x in xs if aux(x)]

Outcomes (no cooperation):

- ``thin_wrapper`` -- main only returns aux's result for its own parameters passed unchanged
  (constants allowed): ``return aux(x)`` or ``r = aux(x)`` then ``return r`` (``await``
  allowed); ``return aux(x.lower())`` pre-processes and is a decorator instead::

      def main(x):
          return aux(x)

- ``ignored_result`` -- main calls aux but never uses the value (``aux(x)`` as a statement, or a
  variable that is never read)::

      def main(x):
          aux(x)
          return x

- ``no_call`` -- main never calls or passes aux in live code::

      def main(x):
          return x + 1

- ``no_aux`` -- aux's code has no function named ``aux_name`` (``aux = 5`` is not one), or its
  body is empty (docstring, ``pass``, ``...`` or ``raise NotImplementedError`` only)::

      def aux(x):
          pass

- ``unparsable`` -- aux's or main's code is not valid Python, or main's code holds no function
  to classify (no ``main_name``; with ``main_name=None``, no function other than aux)::

      def main(x)
          return aux(x)

An outcome excludes every other label, so its flag set is that single outcome. The four schemes can
co-occur; ``flags`` holds all that apply and ``primary`` is the first in this precedence::

    unparsable > no_aux > no_call > ignored_result > thin_wrapper
      > fallback > strategy_filter > coordinator > decorator

Why this order: the outcomes are checked in the order a pair can fail to cooperate (code cannot
be read, there is nothing to call, it is not called, its value is dropped, nothing is added to
it), and each one makes the later questions moot. Among the schemes the more specific control-flow
relation wins: a fallback means main keeps an implementation of its own and treats aux as
optional; a strategy filter means aux's value steers main's control flow; a coordinator is about
how many times aux runs; decorator is the weakest (almost any non-trivial use adds some logic
around the call), so it is both the lowest label and the label given when main uses aux's value
in a way none of the other schemes describe.

What counts as a use of aux in main:

- calls through aliases (``f = aux``, ``f = functools.partial(aux, 1)``, ``functools.cache(aux)``,
  ``f = lambda v: aux(v)``), including aliases bound at the top of main's module;
- aux passed as a value (``key=aux``, ``map(aux, xs)``, ``filter(aux, xs)``), also wrapped in a
  lambda (``key=lambda v: aux(v)``);
- functions nested in main (or defined next to it in main's module) that use aux: a call of such a
  wrapper counts as a use of aux where it is called, and its own body is classified too;
- dead code is ignored: statements after ``return``/``raise``/``break``/``continue`` in a block,
  the body of ``if False:`` (any falsy constant), the ``else`` of ``if True:``, ``while False:``;
- a parameter, assignment or nested ``def`` that rebinds ``aux_name`` inside main shadows aux;
- a stored result read inside a function or lambda nested in main (a closure) is used: handed to
  other code, like any use no scheme describes;
- what aux does internally (recursion included) never affects main's classification.

The outcomes and the uses are found by `orchestry.envs.code.aux_use`, the same analysis the level
reward (`orchestry.envs.code.reward`) reads, so the reward's "main calls aux" is "a scheme or
``thin_wrapper``" here and its non-trivial bonus is "a scheme"; what main does with each use's
value is read by `orchestry.analysis.aux_value`, and the schemes are built from it here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass

from orchestry.analysis.aux_value import use_kind
from orchestry.envs.code.aux_use import (
    USES,
    FunctionUses,
    Use,
    analyse_aux_use,
    mentions,
    plain_args,
)
from orchestry.envs.code.live_code import Step, assigned_names, params, strip_docstring

SCHEMES: tuple[str, ...] = ("fallback", "decorator", "coordinator", "strategy_filter")
OUTCOMES: tuple[str, ...] = ("thin_wrapper", "ignored_result", "no_call", "no_aux", "unparsable")
LABELS: tuple[str, ...] = SCHEMES + OUTCOMES
PRECEDENCE: tuple[str, ...] = (
    "unparsable",
    "no_aux",
    "no_call",
    "ignored_result",
    "thin_wrapper",
    "fallback",
    "strategy_filter",
    "coordinator",
    "decorator",
)

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class SchemeResult:
    """Every scheme/outcome that applies to a pair, and the one label chosen by precedence."""

    flags: frozenset[str]
    primary: str


def scheme_counts(results: Iterable[SchemeResult]) -> dict[str, int]:
    """Count primary labels; every label in LABELS is present, zeros included."""
    counts = dict.fromkeys(LABELS, 0)
    for result in results:
        counts[result.primary] += 1
    return counts


def _result(flags: Iterable[str]) -> SchemeResult:
    flag_set = frozenset(flags)
    unknown = flag_set - set(LABELS)
    if unknown or not flag_set:
        raise ValueError(
            f"scheme flags must be a non-empty subset of LABELS, got {sorted(flag_set)}"
        )
    primary = next(label for label in PRECEDENCE if label in flag_set)
    return SchemeResult(flags=flag_set, primary=primary)


def classify_pair(
    aux_code: str, main_code: str, aux_name: str = "aux", main_name: str | None = None
) -> SchemeResult:
    """Classify how main uses aux; `main_name=None` picks main's first top-level function.

    The first top-level function whose name is not `aux_name` is taken, so a main completion
    that also redefines aux still classifies its own function. aux is the last top-level
    `def aux_name` in `aux_code` (the one Python binds). The outcomes and main's uses of aux come
    from `orchestry.envs.code.aux_use`, the definition the level reward reads too; the schemes
    are read here from those uses.
    """
    found = analyse_aux_use(aux_code, main_code, aux_name, main_name)
    if found.outcome != USES or found.main is None:
        return _result([found.outcome])
    return _result(_scheme_flags(found.main) or {"decorator"})


def _scheme_flags(found: FunctionUses) -> set[str]:
    """The schemes shown by the kept uses of aux in one function (and in the wrappers it calls)."""
    flags: set[str] = set()
    single_calls: list[tuple[Use, str]] = []
    for use in found.uses:
        if use.dropped:
            continue
        kind = use_kind(found.fn, use)
        if kind == "fallback" or _in_try_with_fallback(use.path):
            flags.add("fallback")
        if kind in ("predicate", "select"):
            flags.add("strategy_filter")
        elif kind == "mapper" or (_in_loop(use.path) and kind != "feeds_aux"):
            flags.add("coordinator")
        elif use.is_call:
            single_calls.append((use, kind))
        if use.inner is not None:
            flags |= _scheme_flags(use.inner)

    combined = _combined_calls([use for use, _ in single_calls])
    if combined:
        flags.add("coordinator")
    own_params = params(found.fn) - assigned_names(found.fn)
    for use, kind in single_calls:
        if any(use is other for other in combined):
            continue  # calls on different parts are decomposition, not decoration
        if kind in ("transformed", "combined", "feeds_aux") or not plain_args(use.node, own_params):
            flags.add("decorator")
    if single_calls and _has_input_guard(found.fn, [use.node for use in found.uses]):
        flags.add("decorator")
    return flags


# --- path questions -------------------------------------------------------------------------


def _in_loop(path: tuple[Step, ...]) -> bool:
    """True when the node can run several times per call of the function."""
    for position, (parent, name, index) in enumerate(path):
        if isinstance(parent, _LOOPS) and name == "body":
            return True
        if isinstance(parent, ast.While) and name == "test":
            return True
        if isinstance(parent, _COMPREHENSIONS):
            if name != "generators" or index != 0:
                return True
            # Only the first generator's iterable is evaluated once; its target/ifs repeat.
            below = path[position + 1] if position + 1 < len(path) else None
            if below is not None and below[1] != "iter":
                return True
    return False


def _in_try_with_fallback(path: tuple[Step, ...]) -> bool:
    for parent, name, _ in path:
        if isinstance(parent, ast.Try | ast.TryStar) and name == "body":
            if any(not _only_reraises(h.body) for h in parent.handlers):
                return True
    return False


def _only_reraises(body: list[ast.stmt]) -> bool:
    return all(isinstance(stmt, ast.Raise) for stmt in body)


def _branches(path: tuple[Step, ...]) -> dict[int, tuple[str, int | None]]:
    """The branch taken at each if/try/match on the path (keyed by node id)."""
    taken: dict[int, tuple[str, int | None]] = {}
    for parent, name, index in path:
        if isinstance(parent, ast.If | ast.IfExp) and name in ("body", "orelse"):
            taken[id(parent)] = (name, None)
        elif isinstance(parent, ast.Try | ast.TryStar) and name in ("body", "handlers"):
            taken[id(parent)] = (name, index)
        elif isinstance(parent, ast.Match) and name == "cases":
            taken[id(parent)] = (name, index)
        elif isinstance(parent, ast.BoolOp):
            taken[id(parent)] = ("values", index)
    return taken


def _exclusive(a: Use, b: Use) -> bool:
    """Two uses can never both run in one call (different branches, or after an early return)."""
    branches_a, branches_b = _branches(a.path), _branches(b.path)
    for key in branches_a.keys() & branches_b.keys():
        left, right = branches_a[key], branches_b[key]
        if left != right and left[0] != "values":
            return True
        if left[0] == "values" and left != right:
            return True  # `aux(a) or aux(b)`: the second runs only when the first fails
    return _after_early_return(a, b) or _after_early_return(b, a)


def _after_early_return(first: Use, second: Use) -> bool:
    """`first` is inside an `if` that always returns and `second` follows that `if`."""
    for parent, name, _ in first.path:
        if not isinstance(parent, ast.If) or name not in ("body", "orelse"):
            continue
        block = getattr(parent, name)
        if not block or not isinstance(block[-1], ast.Return | ast.Raise):
            continue
        for ancestor, field_name, position in second.path:
            block_of_if = getattr(ancestor, field_name, None)
            if (
                isinstance(block_of_if, list)
                and parent in block_of_if
                and position is not None
                and position > block_of_if.index(parent)
            ):
                return True
    return False


def _nested(inner: Use, outer: Use) -> bool:
    return any(parent is outer.node for parent, _, _ in inner.path)


def _combined_calls(calls: list[Use]) -> list[Use]:
    """Calls on different arguments that can run on the same path, to be combined."""
    combined: list[Use] = []
    for i, a in enumerate(calls):
        for b in calls[i + 1 :]:
            if _nested(a, b) or _nested(b, a) or _exclusive(a, b):
                continue
            if _args_dump(a.node) != _args_dump(b.node):
                combined += [use for use in (a, b) if not any(use is c for c in combined)]
    return combined


def _args_dump(call: ast.AST) -> str:
    assert isinstance(call, ast.Call)
    return ast.dump(ast.Tuple(elts=[*call.args, *(k.value for k in call.keywords)], ctx=ast.Load()))


def _has_input_guard(fn: ast.AST, use_nodes: list[ast.AST]) -> bool:
    """An early-return `if` on the inputs, before the first statement that uses aux."""
    body = fn.body if isinstance(fn.body, list) else []
    for stmt in strip_docstring(body):
        if any(mentions(stmt, node) for node in use_nodes):
            return False
        if (
            isinstance(stmt, ast.If)
            and stmt.body
            and isinstance(stmt.body[-1], ast.Return | ast.Raise)
        ):
            return True
    return False
