"""What main does with aux's value: the consumer kind of each use, read from its ancestors.

The cooperation schemes (`orchestry.analysis.schemes`) are built from these kinds; the uses
themselves, and whether a value is used at all, come from `orchestry.envs.code.aux_use`.

Kinds: discarded, returned, predicate (a test, key or filter), select (an index), mapper (passed to
`map`/`reduce`), fallback (`aux(x) or default`, a validity test on a value also used), feeds_aux
(argument of another aux call), combined (`total += aux(x)`), transformed (anything else: part of a
larger expression, handed to other code). A value stored in one name is judged by its reads.
"""

from __future__ import annotations

import ast

from orchestry.envs.code.aux_use import Use, call_name, mentions
from orchestry.envs.code.live_code import Step, read_in_closure, variable_loads

# Callables that take a function and apply it to many elements (coordinator) ...
_MAPPERS = frozenset({"map", "reduce", "starmap", "accumulate", "apply_along_axis", "vectorize"})
# ... or use it to decide which elements to keep or pick (strategy filter).
_PREDICATE_TAKERS = frozenset({"filter", "filterfalse", "takewhile", "dropwhile"})
# Constants whose comparison with aux's result reads as "aux gave nothing usable".
_SENTINELS = (None, False, -1, "")


def use_kind(fn: ast.AST, use: Use) -> str:
    """How a use's value is consumed; a value stored in a variable is judged by its reads."""
    kind, var = _consumer(use.node, use.path, use.is_call)
    if kind != "var":
        return kind
    roles = {_load_role(load, path) for load, path in variable_loads(fn, var)}
    if read_in_closure(fn, var):
        roles.add("transformed")  # read by a nested function or lambda: handed to other code
    parent, _, _ = use.path[-1]
    if isinstance(parent, ast.NamedExpr):
        # `(r := aux(x)) is not None`: the walrus is read where it stands, too.
        roles.add(_load_role(parent, use.path[:-1]))
    return _var_kind(roles)


def _consumer(node: ast.AST, path: tuple[Step, ...], is_call: bool) -> tuple[str, str]:
    """What happens to the value of a use, read from its nearest ancestors.

    Kinds: discarded, returned, var (assigned to one name, given as second item), predicate,
    select, mapper, fallback (`aux(x) or default`, a validity test), feeds_aux (argument of
    another aux call), combined (`total += aux(x)`), transformed (part of a larger expression).
    """
    if not is_call:
        return _reference_consumer(path), ""
    direct = True  # the value reaches the current ancestor unchanged (only `await` between)
    for depth in range(len(path) - 1, -1, -1):
        parent, name, index = path[depth]
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
            if not _is_validity_check(node, parent, name):
                return "predicate", ""
            # A check that only raises validates aux's value: post-processing, no fallback.
            return ("transformed" if _only_raises(parent) else "fallback"), ""
        if (
            isinstance(parent, ast.BoolOp)
            and index != len(parent.values) - 1
            and not _under_test(path[:depth])
        ):
            return ("fallback" if isinstance(parent.op, ast.Or) else "predicate"), ""
        if isinstance(parent, ast.Subscript) and name == "slice":
            return "select", ""
        if isinstance(parent, ast.Call) and name == "args" and _is_use_call(parent, node):
            return "feeds_aux", ""
        if isinstance(parent, ast.stmt):
            return "transformed", ""
        direct = direct and isinstance(parent, ast.Await)
    return "transformed", ""


def _is_use_call(call: ast.Call, node: ast.AST) -> bool:
    """True when `call` calls the same function as `use` (nested calls `aux(aux(x))`)."""
    own = node.func if isinstance(node, ast.Call) else None
    return isinstance(call.func, ast.Name) and isinstance(own, ast.Name) and own.id == call.func.id


def _reference_consumer(path: tuple[Step, ...]) -> str:
    """aux passed as a value: a key or predicate, a function mapped over elements, or other."""
    parent, name, index = path[-1]
    if isinstance(parent, ast.keyword) and parent.arg == "key":
        return "predicate"
    if isinstance(parent, ast.Call) and name == "args" and index == 0:
        callee = call_name(parent)
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
        if isinstance(test.ops[0], ast.Is | ast.IsNot) and mentions(left, node):
            return True
        if isinstance(test.ops[0], ast.Eq | ast.NotEq | ast.Lt | ast.LtE | ast.Gt):
            if _is_len_of(left, node) and isinstance(right, ast.Constant) and right.value in (0, 1):
                return True  # `len(r) == 0`, `len(r) < 1`, `len(r) > 0`
        if isinstance(test.ops[0], ast.Eq | ast.NotEq):
            return (mentions(left, node) and _is_sentinel(right)) or (
                mentions(right, node) and _is_sentinel(left)
            )
        return False
    if _is_len_of(test, node):
        return True  # `if len(r):` / `if not len(r):`
    if isinstance(test, ast.Call) and call_name(test) in ("isinstance", "callable"):
        return bool(test.args) and mentions(test.args[0], node)
    return False


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
        and call_name(expr) == "len"
        and bool(expr.args)
        and mentions(expr.args[0], node)
    )


def _load_role(load: ast.expr, path: tuple[Step, ...]) -> str:
    """The role of one read of a variable holding aux's result."""
    kind, _ = _consumer(load, path, True)
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
