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
- what aux does internally (recursion included) never affects main's classification.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

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

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_TERMINATORS = (ast.Return, ast.Raise, ast.Break, ast.Continue)
# Callables that take a function and apply it to many elements (coordinator) ...
_MAPPERS = frozenset({"map", "reduce", "starmap", "accumulate", "apply_along_axis", "vectorize"})
# ... or use it to decide which elements to keep or pick (strategy filter).
_PREDICATE_TAKERS = frozenset({"filter", "filterfalse", "takewhile", "dropwhile"})
# Callables that wrap a function into another function calling it (aliases).
_ALIAS_MAKERS = frozenset({"partial", "cache", "lru_cache"})
# Constants whose comparison with aux's result reads as "aux gave nothing usable".
_SENTINELS = (None, False, -1, "")


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
    `def aux_name` in `aux_code` (the one Python binds).
    """
    try:
        aux_tree = ast.parse(aux_code)
        main_tree = ast.parse(main_code)
    except (SyntaxError, ValueError):
        return _result(["unparsable"])
    main_fn = _find_main(main_tree, aux_name, main_name)
    if main_fn is None:
        return _result(["unparsable"])
    aux_fn = _find_last_function(aux_tree, aux_name)
    if aux_fn is None or _is_empty_body(aux_fn.body):
        return _result(["no_aux"])
    module_aliases = _module_aliases(main_tree, aux_name, main_fn.name)
    return _result(_classify_main(main_fn, aux_name, module_aliases))


# --- finding the two functions ------------------------------------------------------------


def _find_last_function(
    tree: ast.Module, name: str
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = None
    for node in tree.body:
        if isinstance(node, _FUNCS) and node.name == name:
            found = node
    return found


def _find_main(
    tree: ast.Module, aux_name: str, main_name: str | None
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if main_name is not None:
        return _find_last_function(tree, main_name)
    for node in tree.body:
        if isinstance(node, _FUNCS) and node.name != aux_name:
            return node
    return None


def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return body[1:]
    return body


def _is_empty_body(body: list[ast.stmt]) -> bool:
    for stmt in _strip_docstring(body):
        if isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # `...` or a stray string
        if isinstance(stmt, ast.Raise) and _names_not_implemented(stmt.exc):
            continue
        return False
    return True


def _names_not_implemented(exc: ast.expr | None) -> bool:
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


# --- dead code ------------------------------------------------------------------------------


def _constant_truth(test: ast.expr) -> bool | None:
    """The truth value of a constant test (`if False:`, `if 0:`, `if not True:`), else None."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _constant_truth(test.operand)
        return None if inner is None else not inner
    return None


def _live_block(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a block that can run: pruned recursively, cut after a terminator."""
    live: list[ast.stmt] = []
    for stmt in body:
        for kept in _live_statement(stmt):
            live.append(kept)
            if isinstance(kept, _TERMINATORS):
                return live
    return live


def _live_statement(stmt: ast.stmt) -> list[ast.stmt]:
    if isinstance(stmt, ast.If):
        truth = _constant_truth(stmt.test)
        if truth is True:
            return _live_block(stmt.body)
        if truth is False:
            return _live_block(stmt.orelse)
    if isinstance(stmt, ast.While) and _constant_truth(stmt.test) is False:
        return _live_block(stmt.orelse)
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            setattr(stmt, name, _live_block(block) or [ast.Pass()])
    if isinstance(stmt, ast.Try | ast.TryStar):
        for handler in stmt.handlers:
            handler.body = _live_block(handler.body) or [ast.Pass()]
    if isinstance(stmt, ast.Match):
        for case in stmt.cases:
            case.body = _live_block(case.body) or [ast.Pass()]
    return [stmt]


def _live_function(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> ast.AST:
    """A copy of a function with its dead code removed (nested functions pruned too)."""
    fn = copy.deepcopy(fn)
    if isinstance(fn, ast.Lambda):
        return fn
    fn.body = _live_block(fn.body) or [ast.Pass()]
    for node in ast.walk(fn):
        if isinstance(node, _FUNCS) and node is not fn:
            node.body = _live_block(node.body) or [ast.Pass()]
    return fn


# --- tree walking with ancestry ---------------------------------------------------------------

# One step from a parent to a child: (parent node, field name, index in a list field or None).
Step = tuple[ast.AST, str, int | None]


def _walk(node: ast.AST, path: tuple[Step, ...] = ()) -> Iterator[tuple[ast.AST, tuple[Step, ...]]]:
    """Every node under `node` (not entering nested functions or lambdas) with its ancestry."""
    for name, value in ast.iter_fields(node):
        children = value if isinstance(value, list) else [value]
        for index, child in enumerate(children):
            if not isinstance(child, ast.AST):
                continue
            step = (node, name, index if isinstance(value, list) else None)
            yield child, (*path, step)
            if not isinstance(child, (*_FUNCS, ast.Lambda, ast.ClassDef)):
                yield from _walk(child, (*path, step))


def _names_loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _call_name(call: ast.Call) -> str | None:
    """`f` for `f(...)`, `reduce` for `functools.reduce(...)`."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


# --- aliases and wrappers -------------------------------------------------------------------


def _wrapped_function(call: ast.Call) -> ast.expr | None:
    """`f` in `partial(f, 1)`, `functools.cache(f)` or `functools.lru_cache(maxsize=None)(f)`."""
    if not call.args:
        return None
    if _call_name(call) in _ALIAS_MAKERS:
        return call.args[0]
    if isinstance(call.func, ast.Call) and _call_name(call.func) in _ALIAS_MAKERS:
        return call.args[0]
    return None


def _is_aux_callable(expr: ast.expr, callables: set[str]) -> bool:
    """`aux`, `partial(aux, 1)`, `functools.cache(aux)`, `lambda v: aux(v)` (for known names)."""
    if isinstance(expr, ast.Name):
        return expr.id in callables
    if isinstance(expr, ast.Call):
        wrapped = _wrapped_function(expr)
        return wrapped is not None and _is_aux_callable(wrapped, callables)
    if isinstance(expr, ast.Lambda):
        return bool(_names_loaded(expr.body) & callables)
    return False


def _module_aliases(tree: ast.Module, aux_name: str, main_fn_name: str) -> dict[str, ast.AST]:
    """Top-level names in main's module bound to aux or to functions that use aux.

    Maps each name to the function body (a def or lambda) to classify as a wrapper, or to the
    name `aux` itself for plain aliases.
    """
    callables: dict[str, ast.AST] = {aux_name: ast.Name(id=aux_name, ctx=ast.Load())}
    changed = True
    while changed:
        changed = False
        for node in tree.body:
            bound = _binding(node, set(callables), aux_name)
            if bound is None:
                continue
            name, target = bound
            if name not in callables and name != main_fn_name:
                callables[name] = target
                changed = True
    return callables


def _binding(node: ast.AST, callables: set[str], aux_name: str) -> tuple[str, ast.AST] | None:
    """(name, definition) when `node` binds a name to something that calls aux."""
    if isinstance(node, _FUNCS):
        if node.name == aux_name:
            return None
        live = _live_function(node)
        if any(_names_loaded(stmt) & callables for stmt in live.body):
            return node.name, node
        return None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Name) and _is_aux_callable(node.value, callables):
            return target.id, node.value
    return None


# --- the analysis of one function body --------------------------------------------------------


@dataclass
class _Use:
    """One place where main calls aux (or a wrapper of it) or passes it as a value."""

    node: ast.AST
    path: tuple[Step, ...]
    is_call: bool
    wrapper: ast.AST | None  # the def/lambda classified as a wrapper, None for aux or an alias


@dataclass
class _Analysis:
    flags: set[str] = field(default_factory=set)
    uses: list[_Use] = field(default_factory=list)
    used_value: bool = False


def _classify_main(
    main_fn: ast.FunctionDef | ast.AsyncFunctionDef,
    aux_name: str,
    module_aliases: dict[str, ast.AST],
) -> set[str]:
    live = _live_function(main_fn)
    analysis = _analyse(live, aux_name, module_aliases, depth=0)
    if not analysis.uses:
        return {"no_call"}
    if not analysis.used_value:
        return {"ignored_result"}
    if _is_thin_wrapper(live, analysis.uses):
        return {"thin_wrapper"}
    return analysis.flags or {"decorator"}


def _params(fn: ast.AST) -> set[str]:
    args = fn.args  # type: ignore[attr-defined]
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return set(names)


def _assigned_names(fn: ast.AST) -> set[str]:
    """Names (re)bound in a function's own scope by assignment, loops, with, imports or defs."""
    names: set[str] = set()
    for node, _ in _walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (*_FUNCS, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return names


def _local_callables(
    fn: ast.AST, aux_name: str, inherited: dict[str, ast.AST]
) -> dict[str, ast.AST]:
    """aux-callables visible in `fn`: inherited ones not shadowed, plus local aliases/wrappers."""
    params = _params(fn)
    shadowed = params | _assigned_names(fn)
    callables = {name: target for name, target in inherited.items() if name not in shadowed}
    body = fn.body if isinstance(fn.body, list) else []
    changed = True
    while changed:
        changed = False
        for node, _ in _walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, (*_FUNCS, ast.Assign)):
                bound = _binding(node, set(callables), aux_name)
                if bound is not None and bound[0] not in callables:
                    callables[bound[0]] = bound[1]
                    changed = True
    return callables


def _analyse(fn: ast.AST, aux_name: str, inherited: dict[str, ast.AST], depth: int) -> _Analysis:
    """Find the uses of aux in one (live) function and the schemes they show."""
    callables = _local_callables(fn, aux_name, inherited)
    analysis = _Analysis()
    if not callables:
        return analysis
    for node, path in _walk(fn):
        use = _as_use(node, path, callables)
        if use is not None:
            analysis.uses.append(use)
    kinds = [_use_kind(fn, use) for use in analysis.uses]
    analysis.used_value = any(kind != "discarded" for kind in kinds)

    single_calls: list[tuple[_Use, str]] = []
    for use, kind in zip(analysis.uses, kinds, strict=True):
        if kind == "discarded":
            continue
        if kind == "fallback" or _in_try_with_fallback(use.path):
            analysis.flags.add("fallback")
        if kind in ("predicate", "select"):
            analysis.flags.add("strategy_filter")
        elif kind == "mapper" or (_in_loop(use.path) and kind != "feeds_aux"):
            analysis.flags.add("coordinator")
        elif use.is_call:
            single_calls.append((use, kind))
        if use.wrapper is not None and depth < 3:
            inner_inherited = {n: t for n, t in callables.items() if t is not use.wrapper}
            inner = _analyse(_live_function(use.wrapper), aux_name, inner_inherited, depth + 1)
            analysis.flags |= inner.flags

    combined = _combined_calls([use for use, _ in single_calls])
    if combined:
        analysis.flags.add("coordinator")
    params = _params(fn) - _assigned_names(fn)
    for use, kind in single_calls:
        if any(use is other for other in combined):
            continue  # calls on different parts are decomposition, not decoration
        if kind in ("transformed", "combined", "feeds_aux") or not _plain_args(use.node, params):
            analysis.flags.add("decorator")
    if single_calls and _has_input_guard(fn, [use.node for use in analysis.uses]):
        analysis.flags.add("decorator")
    return analysis


def _use_kind(fn: ast.AST, use: _Use) -> str:
    """How a use's value is consumed; a value stored in a variable is judged by its reads."""
    kind, var = _consumer(use)
    if kind != "var":
        return kind
    roles = {_load_role(load, path) for load, path in _variable_loads(fn, var)}
    parent, _, _ = use.path[-1]
    if isinstance(parent, ast.NamedExpr):
        # `(r := aux(x)) is not None`: the walrus is read where it stands, too.
        roles.add(_load_role(parent, use.path[:-1]))
    return _var_kind(roles)


def _as_use(node: ast.AST, path: tuple[Step, ...], callables: dict[str, ast.AST]) -> _Use | None:
    """A `_Use` when `node` calls or passes an aux-callable (a name, alias maker or lambda)."""
    parent = path[-1] if path else None
    if isinstance(node, ast.Call) and _is_aux_callable(node.func, set(callables)):
        return _Use(node, path, True, _wrapper_of(node.func, callables))
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in callables:
        if parent is not None and isinstance(parent[0], ast.Call) and parent[1] == "func":
            return None  # the call itself is the use
        if parent is not None and _is_alias_maker_arg(parent):
            return None  # `partial(aux, 1)`: the use is where the partial goes
        if parent is not None and _is_alias_assignment(parent, callables):
            return None  # `f = aux`: the use is where f is called
        return _Use(node, path, False, _wrapper_of(node, callables))
    if isinstance(node, ast.Call) and _is_aux_callable(node, set(callables)):
        if parent is not None and _is_alias_assignment(parent, callables):
            return None
        if parent is not None and isinstance(parent[0], ast.Call) and parent[1] == "func":
            return None
        return _Use(node, path, False, None)
    if isinstance(node, ast.Lambda) and _is_aux_callable(node, set(callables)):
        if parent is not None and _is_alias_assignment(parent, callables):
            return None
        return _Use(node, path, False, node)
    return None


def _is_alias_maker_arg(step: Step) -> bool:
    parent, name, index = step
    return (
        isinstance(parent, ast.Call)
        and name == "args"
        and index == 0
        and _wrapped_function(parent) is not None
    )


def _is_alias_assignment(step: Step, callables: dict[str, ast.AST]) -> bool:
    parent, name, _ = step
    if isinstance(parent, ast.Assign) and name == "value" and len(parent.targets) == 1:
        target = parent.targets[0]
        return isinstance(target, ast.Name) and target.id in callables
    return False


def _wrapper_of(expr: ast.expr, callables: dict[str, ast.AST]) -> ast.AST | None:
    if isinstance(expr, ast.Name):
        target = callables.get(expr.id)
        if isinstance(target, (*_FUNCS, ast.Lambda)):
            return target
        if isinstance(target, ast.expr) and not isinstance(target, ast.Name):
            return _wrapper_of(target, callables)
        return None
    if isinstance(expr, ast.Lambda):
        return expr
    if isinstance(expr, ast.Call):
        wrapped = _wrapped_function(expr)
        return None if wrapped is None else _wrapper_of(wrapped, callables)
    return None


# --- how a value is consumed ------------------------------------------------------------------


def _consumer(use: _Use) -> tuple[str, str]:
    """What happens to the value of a use, read from its nearest ancestors.

    Kinds: discarded, returned, var (assigned to one name, given as second item), predicate,
    select, mapper, fallback (`aux(x) or default`, a validity test), feeds_aux (argument of
    another aux call), combined (`total += aux(x)`), transformed (part of a larger expression).
    """
    if not use.is_call:
        return _reference_consumer(use), ""
    direct = True  # the value reaches the current ancestor unchanged (only `await` between)
    for depth in range(len(use.path) - 1, -1, -1):
        parent, name, index = use.path[depth]
        if isinstance(parent, ast.Expr):
            return ("discarded" if direct else "transformed"), ""
        if isinstance(parent, ast.Return) or (isinstance(parent, ast.Lambda) and name == "body"):
            return ("returned" if direct else "transformed"), ""
        if isinstance(parent, ast.Assign | ast.AnnAssign | ast.NamedExpr) and name == "value":
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if direct and len(targets) == 1 and isinstance(targets[0], ast.Name):
                return "var", targets[0].id
            return "transformed", ""
        if isinstance(parent, ast.AugAssign):
            return "combined", ""
        if _is_test(parent, name):
            if not _is_validity_check(use.node, parent, name):
                return "predicate", ""
            # A check that only raises validates aux's value: post-processing, no fallback.
            return ("transformed" if _only_raises(parent) else "fallback"), ""
        if (
            isinstance(parent, ast.BoolOp)
            and index != len(parent.values) - 1
            and not _under_test(use.path[:depth])
        ):
            return ("fallback" if isinstance(parent.op, ast.Or) else "predicate"), ""
        if isinstance(parent, ast.Subscript) and name == "slice":
            return "select", ""
        if isinstance(parent, ast.Call) and name == "args" and _is_use_call(parent, use):
            return "feeds_aux", ""
        if isinstance(parent, ast.stmt):
            return "transformed", ""
        direct = direct and isinstance(parent, ast.Await)
    return "transformed", ""


def _is_use_call(call: ast.Call, use: _Use) -> bool:
    """True when `call` calls the same function as `use` (nested calls `aux(aux(x))`)."""
    own = use.node.func if isinstance(use.node, ast.Call) else None
    return isinstance(call.func, ast.Name) and isinstance(own, ast.Name) and own.id == call.func.id


def _reference_consumer(use: _Use) -> str:
    """aux passed as a value: a key or predicate, a function mapped over elements, or other."""
    parent, name, index = use.path[-1]
    if isinstance(parent, ast.keyword) and parent.arg == "key":
        return "predicate"
    if isinstance(parent, ast.Call) and name == "args" and index == 0:
        callee = _call_name(parent)
        if callee in _PREDICATE_TAKERS:
            return "predicate"
        if callee in _MAPPERS:
            return "mapper"
    if isinstance(parent, ast.Return):
        return "returned"
    # Handed to some other code (a list of functions, an unknown higher-order function): used,
    # but with no scheme of its own.
    return "transformed"


def _under_test(path: tuple[Step, ...]) -> bool:
    """The innermost statement or lambda above this path holds it in a test position."""
    for parent, name, _ in reversed(path):
        if _is_test(parent, name):
            return True
        if isinstance(parent, ast.stmt | ast.Lambda):
            return False
    return False


def _is_test(parent: ast.AST, name: str) -> bool:
    if isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert) and name == "test":
        return True
    return isinstance(parent, ast.comprehension) and name == "ifs"


def _only_raises(check: ast.AST) -> bool:
    """`assert r is not None`, or an `if` whose only branch raises: nothing computed instead."""
    if isinstance(check, ast.Assert):
        return True
    if isinstance(check, ast.If):
        return not check.orelse and all(isinstance(stmt, ast.Raise) for stmt in check.body)
    return False


def _is_validity_check(node: ast.AST, parent: ast.AST, name: str) -> bool:
    """The test around aux's value asks "did aux give something usable?" (None, sentinel, type)."""
    test = getattr(parent, name)
    tests = test if isinstance(test, list) else [test]
    return any(_checks_validity(t, node) for t in tests)


def _checks_validity(test: ast.expr, node: ast.AST) -> bool:
    if test is node and isinstance(node, ast.Name | ast.NamedExpr):
        return True  # `if r:` on a stored result (a direct `if aux(x):` is a predicate)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _checks_validity(test.operand, node)
    if isinstance(test, ast.BoolOp):
        return any(_checks_validity(v, node) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], ast.Is | ast.IsNot) and _mentions(left, node):
            return True
        if isinstance(test.ops[0], ast.Eq | ast.NotEq | ast.Lt | ast.LtE | ast.Gt):
            if _is_len_of(left, node) and isinstance(right, ast.Constant) and right.value in (0, 1):
                return True  # `len(r) == 0`, `len(r) < 1`, `len(r) > 0`
        if isinstance(test.ops[0], ast.Eq | ast.NotEq):
            return (_mentions(left, node) and _is_sentinel(right)) or (
                _mentions(right, node) and _is_sentinel(left)
            )
        return False
    if _is_len_of(test, node):
        return True  # `if len(r):` / `if not len(r):`
    if isinstance(test, ast.Call) and _call_name(test) in ("isinstance", "callable"):
        return bool(test.args) and _mentions(test.args[0], node)
    return False


def _mentions(expr: ast.AST, node: ast.AST) -> bool:
    return any(sub is node for sub in ast.walk(expr))


def _is_sentinel(expr: ast.expr) -> bool:
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return isinstance(expr.operand, ast.Constant) and expr.operand.value == 1
    if isinstance(expr, ast.List | ast.Tuple | ast.Dict | ast.Set):
        return not getattr(expr, "elts", getattr(expr, "keys", None))
    return isinstance(expr, ast.Constant) and any(
        expr.value is s or (type(expr.value) is type(s) and expr.value == s) for s in _SENTINELS
    )


def _is_len_of(expr: ast.expr, node: ast.AST) -> bool:
    return (
        isinstance(expr, ast.Call)
        and _call_name(expr) == "len"
        and bool(expr.args)
        and _mentions(expr.args[0], node)
    )


def _variable_loads(fn: ast.AST, name: str) -> list[tuple[ast.Name, tuple[Step, ...]]]:
    return [
        (node, path)
        for node, path in _walk(fn)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id == name
    ]


def _load_role(load: ast.expr, path: tuple[Step, ...]) -> str:
    """The role of one read of a variable holding aux's result."""
    kind, _ = _consumer(_Use(load, path, True, None))
    if kind == "fallback":
        return "validity"
    if kind in ("predicate", "select"):
        return kind
    if kind in ("returned", "var"):
        return "returned"
    return kind


def _var_kind(roles: set[str]) -> str:
    """Combine the reads of a result variable into one consumer kind."""
    data = roles - {"validity", "predicate", "select", "discarded"}
    if not roles or roles == {"discarded"}:
        return "discarded"
    if "validity" in roles and data:
        return "fallback"
    if not data:
        return "select" if "select" in roles else "predicate"
    if "predicate" in roles:
        return "transformed"  # tested against a value and used: post-processing
    if data <= {"returned"}:
        return "returned"
    if "combined" in data:
        return "combined"
    return "transformed"


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


def _exclusive(a: _Use, b: _Use) -> bool:
    """Two uses can never both run in one call (different branches, or after an early return)."""
    branches_a, branches_b = _branches(a.path), _branches(b.path)
    for key in branches_a.keys() & branches_b.keys():
        left, right = branches_a[key], branches_b[key]
        if left != right and left[0] != "values":
            return True
        if left[0] == "values" and left != right:
            return True  # `aux(a) or aux(b)`: the second runs only when the first fails
    return _after_early_return(a, b) or _after_early_return(b, a)


def _after_early_return(first: _Use, second: _Use) -> bool:
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


def _nested(inner: _Use, outer: _Use) -> bool:
    return any(parent is outer.node for parent, _, _ in inner.path)


def _combined_calls(calls: list[_Use]) -> list[_Use]:
    """Calls on different arguments that can run on the same path, to be combined."""
    combined: list[_Use] = []
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


def _plain_args(call: ast.AST, params: set[str]) -> bool:
    """Every argument is one of the function's parameters, unchanged, or a constant."""
    assert isinstance(call, ast.Call)
    values = [*call.args, *(k.value for k in call.keywords)]
    for value in values:
        if isinstance(value, ast.Starred):
            value = value.value
        if isinstance(value, ast.Constant):
            continue
        if isinstance(value, ast.Name) and value.id in params:
            continue
        return False
    return True


def _has_input_guard(fn: ast.AST, use_nodes: list[ast.AST]) -> bool:
    """An early-return `if` on the inputs, before the first statement that uses aux."""
    body = fn.body if isinstance(fn.body, list) else []
    for stmt in _strip_docstring(body):
        if any(_mentions(stmt, node) for node in use_nodes):
            return False
        if (
            isinstance(stmt, ast.If)
            and stmt.body
            and isinstance(stmt.body[-1], ast.Return | ast.Raise)
        ):
            return True
    return False


def _is_thin_wrapper(fn: ast.AST, uses: list[_Use]) -> bool:
    """Main's body is `return aux(params)` or `r = aux(params); return r` (aliases allowed)."""
    body = [
        stmt
        for stmt in _strip_docstring(fn.body)  # type: ignore[attr-defined]
        if not isinstance(stmt, ast.Pass) and not _is_alias_statement(stmt, uses)
    ]
    if len(uses) != 1 or not uses[0].is_call or uses[0].wrapper is not None:
        return False
    call = uses[0].node
    params = _params(fn) - _assigned_names(fn)
    if not _plain_args(call, params):
        return False
    if len(body) == 1 and isinstance(body[0], ast.Return):
        return _awaited(body[0].value) is call
    if len(body) == 2 and isinstance(body[0], ast.Assign) and isinstance(body[1], ast.Return):
        targets, ret = body[0].targets, body[1].value
        return (
            _awaited(body[0].value) is call
            and len(targets) == 1
            and isinstance(targets[0], ast.Name)
            and isinstance(ret, ast.Name)
            and ret.id == targets[0].id
        )
    return False


def _is_alias_statement(stmt: ast.stmt, uses: list[_Use]) -> bool:
    """`f = aux` or `f = partial(aux, ...)`: binds an alias, does no work itself."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    value = stmt.value
    is_alias = isinstance(value, ast.Name) or (
        isinstance(value, ast.Call) and _wrapped_function(value) is not None
    )
    return is_alias and not any(_mentions(stmt, use.node) for use in uses)


def _awaited(expr: ast.expr | None) -> ast.expr | None:
    """`aux(x)` for `await aux(x)`, anything else unchanged."""
    return expr.value if isinstance(expr, ast.Await) else expr
