"""How a main function uses one helper `aux`, read from the AST: the one definition of "main uses aux".

The level reward (`orchestry.envs.code.reward`) and the cooperation-scheme classifier
(`orchestry.analysis.schemes`, whose docstring defines each label with examples) both read
`analyse_aux_use`, so what is trained and what is measured cannot diverge. Its outcome, the first
that applies:

- ``unparsable`` -- aux's or main's code does not parse, or holds no main function;
- ``no_aux`` -- no `def aux_name` in aux's code, or its body is empty (docstring, ``pass``, ``...``,
  ``raise NotImplementedError``);
- ``no_call`` -- main never calls or passes aux in live code;
- ``ignored_result`` -- main calls aux but never uses the value;
- ``thin_wrapper`` -- main only returns aux's result for its own parameters passed unchanged;
- ``uses`` -- main uses aux's value beyond a thin wrapper (the classifier then names the scheme).

Uses count through aliases (``f = aux``, ``partial(aux, 1)``, ``cache(aux)``, ``lambda v: aux(v)``)
and through functions that use aux (a call of one is a use; its own uses are kept with it); dead
code (`live_code`) is not read, and a rebinding of ``aux_name`` inside main shadows aux.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from orchestry.envs.code.live_code import (
    FUNCS,
    Step,
    assigned_names,
    find_function,
    is_empty_body,
    live_function,
    params,
    read_in_closure,
    strip_docstring,
    variable_loads,
    walk,
)
from orchestry.envs.code.syntax import parse_program

USES = "uses"
# Every outcome, in the order they are checked (the first that applies is the outcome).
OUTCOMES = ("unparsable", "no_aux", "no_call", "ignored_result", "thin_wrapper", USES)
# Callables that wrap a function into another function calling it (aliases).
_ALIAS_MAKERS = frozenset({"partial", "cache", "lru_cache"})
_MAX_WRAPPER_DEPTH = 3


@dataclass(frozen=True, eq=False)
class Use:
    """One place where a function calls aux (or an alias or wrapper of it) or passes it as a value."""

    node: ast.AST  # the call, or the expression that passes aux
    path: tuple[Step, ...]  # its ancestry inside the (live) function
    is_call: bool
    wrapper: ast.AST | None  # the def/lambda that uses aux, None for aux itself or an alias
    dropped: bool  # the value is never used: a bare statement, or stored and never read
    inner: FunctionUses | None  # the wrapper's own uses (for a kept value, three levels deep)


@dataclass(frozen=True, eq=False)
class FunctionUses:
    """The uses of aux in one function, with the dead-code-free copy they point into."""

    fn: ast.AST
    uses: tuple[Use, ...]


@dataclass(frozen=True, eq=False)
class AuxUse:
    """How main uses aux: one of OUTCOMES, and main's uses when there is a main and an aux."""

    outcome: str
    main: FunctionUses | None


def analyse_aux_use(
    aux_code: str, main_code: str, aux_name: str = "aux", main_name: str | None = None
) -> AuxUse:
    """Read how main uses aux; `main_name=None` takes main's first top-level function not aux.

    aux is the last top-level `def aux_name` in `aux_code` (the one Python binds), main the last
    `def main_name` in `main_code`.
    """
    try:
        aux_tree = parse_program(aux_code)
        main_tree = parse_program(main_code)
    except (SyntaxError, ValueError):
        return AuxUse("unparsable", None)
    main_fn = _find_main(main_tree, aux_name, main_name)
    if main_fn is None:
        return AuxUse("unparsable", None)
    aux_fn = find_function(aux_tree, aux_name)
    if aux_fn is None or is_empty_body(aux_fn.body):
        return AuxUse("no_aux", None)
    live = live_function(main_fn)
    found = _function_uses(live, aux_name, _module_aliases(main_tree, aux_name, main_fn.name), 0)
    if not found.uses:
        return AuxUse("no_call", found)
    if all(use.dropped for use in found.uses):
        return AuxUse("ignored_result", found)
    if _is_thin_wrapper(live, found.uses):
        return AuxUse("thin_wrapper", found)
    return AuxUse(USES, found)


def _find_main(
    tree: ast.Module, aux_name: str, main_name: str | None
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if main_name is not None:
        return find_function(tree, main_name)
    for node in tree.body:
        if isinstance(node, FUNCS) and node.name != aux_name:
            return node
    return None


# --- aliases and wrappers -------------------------------------------------------------------


def call_name(call: ast.Call) -> str | None:
    """`f` for `f(...)`, `reduce` for `functools.reduce(...)`."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def mentions(expr: ast.AST, node: ast.AST) -> bool:
    return any(sub is node for sub in ast.walk(expr))


def wrapped_function(call: ast.Call) -> ast.expr | None:
    """`f` in `partial(f, 1)`, `functools.cache(f)` or `functools.lru_cache(maxsize=None)(f)`."""
    if not call.args:
        return None
    if call_name(call) in _ALIAS_MAKERS:
        return call.args[0]
    if isinstance(call.func, ast.Call) and call_name(call.func) in _ALIAS_MAKERS:
        return call.args[0]
    return None


def _is_aux_callable(expr: ast.expr, callables: set[str]) -> bool:
    """`aux`, `partial(aux, 1)`, `functools.cache(aux)`, `lambda v: aux(v)` (for known names)."""
    if isinstance(expr, ast.Name):
        return expr.id in callables
    if isinstance(expr, ast.Call):
        wrapped = wrapped_function(expr)
        return wrapped is not None and _is_aux_callable(wrapped, callables)
    if isinstance(expr, ast.Lambda):
        return bool(_names_loaded(expr.body) & callables)
    return False


def _names_loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _module_aliases(tree: ast.Module, aux_name: str, main_fn_name: str) -> dict[str, ast.AST]:
    """Top-level names in main's module bound to aux or to functions that use aux.

    Maps each name to the function body (a def or lambda) to read as a wrapper, or to the
    name `aux` itself for plain aliases.
    """
    callables: dict[str, ast.AST] = {aux_name: ast.Name(id=aux_name, ctx=ast.Load())}
    changed = True
    while changed:
        changed = False
        for node in tree.body:
            if isinstance(node, FUNCS) and node.name == main_fn_name:
                continue  # main itself is not a wrapper
            bound = _binding(node, set(callables), aux_name)
            if bound is not None and bound[0] not in callables and bound[0] != main_fn_name:
                callables[bound[0]] = bound[1]
                changed = True
    return callables


def _binding(node: ast.AST, callables: set[str], aux_name: str) -> tuple[str, ast.AST] | None:
    """(name, definition) when `node` binds a name to something that calls aux."""
    if isinstance(node, FUNCS):
        if node.name == aux_name:
            return None
        live = live_function(node)
        if any(_names_loaded(stmt) & callables for stmt in live.body):  # type: ignore[attr-defined]
            return node.name, node
        return None
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Name) and _is_aux_callable(node.value, callables):
            return target.id, node.value
    return None


def _local_callables(
    fn: ast.AST, aux_name: str, inherited: dict[str, ast.AST]
) -> dict[str, ast.AST]:
    """aux-callables visible in `fn`: inherited ones not shadowed, plus local aliases/wrappers."""
    shadowed = params(fn) | assigned_names(fn)
    callables = {name: target for name, target in inherited.items() if name not in shadowed}
    body = fn.body if isinstance(fn.body, list) else []  # type: ignore[attr-defined]
    changed = True
    while changed:
        changed = False
        for node, _ in walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, (*FUNCS, ast.Assign)):
                bound = _binding(node, set(callables), aux_name)
                if bound is not None and bound[0] not in callables:
                    callables[bound[0]] = bound[1]
                    changed = True
    return callables


# --- the uses in one function -----------------------------------------------------------------


def _function_uses(
    fn: ast.AST, aux_name: str, inherited: dict[str, ast.AST], depth: int
) -> FunctionUses:
    """The uses of aux in one live function; a wrapper whose value is kept is read in turn."""
    callables = _local_callables(fn, aux_name, inherited)
    if not callables:
        return FunctionUses(fn, ())
    uses: list[Use] = []
    for node, path in walk(fn):
        found = _as_use(node, path, callables)
        if found is None:
            continue
        is_call, wrapper = found
        dropped = is_call and _value_dropped(fn, path)
        inner = None
        if wrapper is not None and not dropped and depth < _MAX_WRAPPER_DEPTH:
            inner_inherited = {n: t for n, t in callables.items() if t is not wrapper}
            live = live_function(wrapper)  # type: ignore[arg-type]
            inner = _function_uses(live, aux_name, inner_inherited, depth + 1)
        uses.append(Use(node, path, is_call, wrapper, dropped, inner))
    return FunctionUses(fn, tuple(uses))


def _as_use(
    node: ast.AST, path: tuple[Step, ...], callables: dict[str, ast.AST]
) -> tuple[bool, ast.AST | None] | None:
    """(is a call, wrapper) when `node` calls or passes an aux-callable, else None."""
    parent = path[-1] if path else None
    names = set(callables)
    if isinstance(node, ast.Call) and _is_aux_callable(node.func, names):
        return True, _wrapper_of(node.func, callables)
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in callables:
        if parent is not None and isinstance(parent[0], ast.Call) and parent[1] == "func":
            return None  # the call itself is the use
        if parent is not None and _is_alias_maker_arg(parent):
            return None  # `partial(aux, 1)`: the use is where the partial goes
        if parent is not None and _is_alias_assignment(parent, callables):
            return None  # `f = aux`: the use is where f is called
        return False, _wrapper_of(node, callables)
    if isinstance(node, ast.Call) and _is_aux_callable(node, names):
        if parent is not None and _is_alias_assignment(parent, callables):
            return None
        if parent is not None and isinstance(parent[0], ast.Call) and parent[1] == "func":
            return None
        return False, None
    if isinstance(node, ast.Lambda) and _is_aux_callable(node, names):
        if parent is not None and _is_alias_assignment(parent, callables):
            return None
        return False, node
    return None


def _is_alias_maker_arg(step: Step) -> bool:
    parent, name, index = step
    return (
        isinstance(parent, ast.Call)
        and name == "args"
        and index == 0
        and wrapped_function(parent) is not None
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
        if isinstance(target, (*FUNCS, ast.Lambda)):
            return target
        if isinstance(target, ast.expr) and not isinstance(target, ast.Name):
            return _wrapper_of(target, callables)
        return None
    if isinstance(expr, ast.Lambda):
        return expr
    if isinstance(expr, ast.Call):
        wrapped = wrapped_function(expr)
        return None if wrapped is None else _wrapper_of(wrapped, callables)
    return None


# --- is the value used ------------------------------------------------------------------------


def _holder(path: tuple[Step, ...]) -> int:
    """Index in `path` of the first ancestor that is not an `await` (-1 when there is none)."""
    for depth in range(len(path) - 1, -1, -1):
        if not isinstance(path[depth][0], ast.Await):
            return depth
    return -1


def _is_statement_value(path: tuple[Step, ...]) -> bool:
    """The value at the end of `path` (`await` allowed) is a bare expression statement."""
    depth = _holder(path)
    return depth >= 0 and isinstance(path[depth][0], ast.Expr)


def _value_dropped(fn: ast.AST, path: tuple[Step, ...]) -> bool:
    """The value of the call at `path` is a bare statement, or is stored in one name that is never
    read as a value (a read in a nested function or lambda, a closure, counts as a use)."""
    if _is_statement_value(path):
        return True
    depth = _holder(path)
    parent, name, _ = path[depth] if depth >= 0 else (None, "", None)
    if not isinstance(parent, ast.Assign | ast.AnnAssign | ast.NamedExpr) or name != "value":
        return False
    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        return False
    reads = [load_path for _, load_path in variable_loads(fn, targets[0].id)]
    if isinstance(path[-1][0], ast.NamedExpr):
        reads.append(path[:-1])  # `(r := aux(x)) is None` reads the value where it stands
    if read_in_closure(fn, targets[0].id):
        return False
    return all(_is_statement_value(read) for read in reads)


# --- thin wrapper -----------------------------------------------------------------------------


def plain_args(call: ast.AST, names: set[str]) -> bool:
    """Every argument is one of `names` (the function's parameters), unchanged, or a constant."""
    assert isinstance(call, ast.Call)
    for value in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(value, ast.Starred):
            value = value.value
        if isinstance(value, ast.Constant):
            continue
        if isinstance(value, ast.Name) and value.id in names:
            continue
        return False
    return True


def _is_thin_wrapper(fn: ast.AST, uses: tuple[Use, ...]) -> bool:
    """Main's body is `return aux(params)` or `r = aux(params); return r` (aliases allowed)."""
    body = [
        stmt
        for stmt in strip_docstring(fn.body)  # type: ignore[attr-defined]
        if not isinstance(stmt, ast.Pass) and not _is_alias_statement(stmt, uses)
    ]
    if len(uses) != 1 or not uses[0].is_call or uses[0].wrapper is not None:
        return False
    call = uses[0].node
    if not plain_args(call, params(fn) - assigned_names(fn)):
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


def _is_alias_statement(stmt: ast.stmt, uses: tuple[Use, ...]) -> bool:
    """`f = aux` or `f = partial(aux, ...)`: binds an alias, does no work itself."""
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return False
    value = stmt.value
    is_alias = isinstance(value, ast.Name) or (
        isinstance(value, ast.Call) and wrapped_function(value) is not None
    )
    return is_alias and not any(mentions(stmt, use.node) for use in uses)


def _awaited(expr: ast.expr | None) -> ast.expr | None:
    """`aux(x)` for `await aux(x)`, anything else unchanged."""
    return expr.value if isinstance(expr, ast.Await) else expr
