"""The strict operators hardened test code calls in place of ==, <, in, truth tests and arithmetic.

Child side, standard library only, like harness.py: the parent reads this file's source and sends
it inside the job, and the harness runs it (as root, before isolation and before any untrusted code)
into a namespace of its own; harness.py says why it is not imported. The parent and the tests may
also import it as an ordinary module. So it must not import anything outside the standard library
and must do nothing at import time beyond defining names.

The names in HELPER_NAMES are those `hardening.harden_snippet` calls; keep both sides in step.
"""

from __future__ import annotations

import operator

# Every program pays this module's imports, so nothing heavy at run time (typing).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# Names the parent's AST rewrite (orchestry.envs.code.sandbox.hardening.harden_snippet) calls.
HELPER_NAMES = (
    "__sandbox_cmp__",
    "__sandbox_chain__",
    "__sandbox_truth__",
    "__sandbox_binop__",
    "__sandbox_unary__",
    "__sandbox_inplace__",
)


def make_strict_helpers() -> dict[str, Callable[..., object]]:
    """The functions hardened test code calls in place of ==, <, in, truth tests and arithmetic.

    A value is *plain* when its exact type (checked by identity, so metaclass tricks cannot pass) is
    a builtin value type; containers are plain when everything in them is. Operations on anything
    else raise UntrustedValue, which fails the test: an object cannot pass a test by overriding
    __eq__, __bool__, __lt__, __sub__, __abs__ and the like.
    """
    _type = type
    _id = id
    _len = len
    _range = range
    _dict_items = dict.items
    _type_name = type.__dict__["__name__"].__get__
    numbers = frozenset(map(id, (int, float, bool, complex)))
    scalars = numbers | frozenset(map(id, (str, bytes, type(None), range)))
    sequences = frozenset(map(id, (list, tuple)))
    sets = frozenset(map(id, (set, frozenset)))
    dict_id = id(dict)
    plain_ids = scalars | sequences | sets | {dict_id}
    # The builtin classes themselves are plain too, so `type(candidate(x)) == int` keeps working:
    # comparing them is plain identity.
    type_id = id(type)
    builtin_classes = frozenset(
        map(
            id,
            (
                int,
                float,
                bool,
                complex,
                str,
                bytes,
                type(None),
                range,
                list,
                tuple,
                dict,
                set,
                frozenset,
                type,
                object,
            ),
        )
    )

    def is_plain(x: object) -> bool:
        t = _id(_type(x))
        return t in plain_ids or (t == type_id and _id(x) in builtin_classes)

    class UntrustedValue(Exception):
        """A test compared, truth-tested or computed with a value of a non-builtin type."""

    def refuse(what: str, value: object) -> UntrustedValue:
        return UntrustedValue(f"{what} needs builtin values, got {_type_name(_type(value))}")

    def deep_plain(x: object) -> bool:
        t = _id(_type(x))
        if t in scalars or (t == type_id and _id(x) in builtin_classes):
            return True
        if t in sequences or t in sets:
            for item in x:
                if not deep_plain(item):
                    return False
            return True
        if t == dict_id:
            for key, value in _dict_items(x):
                if not deep_plain(key) or not deep_plain(value):
                    return False
            return True
        return False

    def equal(a: object, b: object) -> bool:
        # Both sides are known deep-plain here, so the builtin == only ever runs builtin code; the
        # explicit walk mirrors Python's rules (1 == 1.0 == True, set == frozenset, nan is nan).
        ta, tb = _id(_type(a)), _id(_type(b))
        if ta in numbers and tb in numbers:
            return a == b
        if ta in sets and tb in sets:
            return a == b
        if ta != tb:
            return False
        if ta in sequences:
            if _len(a) != _len(b):
                return False
            for i in _range(_len(a)):
                x, y = a[i], b[i]
                if x is not y and not equal(x, y):
                    return False
            return True
        if ta == dict_id:
            if _len(a) != _len(b):
                return False
            for key, value in _dict_items(a):
                if key not in b:
                    return False
                other = b[key]
                if value is not other and not equal(value, other):
                    return False
            return True
        return a == b

    def check_deep(op: str, *values: object) -> None:
        for v in values:
            if not deep_plain(v):
                raise refuse(f"comparison '{op}'", v)

    ordering = {
        "<": operator.lt,
        "<=": operator.le,
        ">": operator.gt,
        ">=": operator.ge,
        "in": lambda a, b: a in b,
        "not in": lambda a, b: a not in b,
        "is": operator.is_,
        "is not": operator.is_not,
    }

    def compare(op: str, a: object, b: object) -> bool:
        check_deep(op, a, b)
        if op == "==":
            return equal(a, b)
        if op == "!=":
            return not equal(a, b)
        return ordering[op](a, b)

    def chain(left: object, parts: tuple[object, ...]) -> bool:
        # a < b < c: the comparators arrive as thunks so each is evaluated once and lazily.
        for i in _range(0, _len(parts), 2):
            right = parts[i + 1]()
            if not compare(parts[i], left, right):
                return False
            left = right
        return True

    def truth(value: object) -> object:
        if not is_plain(value):
            raise refuse("a truth test", value)
        return value

    binary = {
        "+": operator.add,
        "-": operator.sub,
        "*": operator.mul,
        "/": operator.truediv,
        "//": operator.floordiv,
        "%": operator.mod,
        "**": operator.pow,
        "@": operator.matmul,
        "<<": operator.lshift,
        ">>": operator.rshift,
        "&": operator.and_,
        "|": operator.or_,
        "^": operator.xor,
    }
    inplace_ops = {
        "+": operator.iadd,
        "-": operator.isub,
        "*": operator.imul,
        "/": operator.itruediv,
        "//": operator.ifloordiv,
        "%": operator.imod,
        "**": operator.ipow,
        "@": operator.imatmul,
        "<<": operator.ilshift,
        ">>": operator.irshift,
        "&": operator.iand,
        "|": operator.ior,
        "^": operator.ixor,
    }
    unary_ops = {"-": operator.neg, "+": operator.pos, "~": operator.invert}

    def binop(op: str, a: object, b: object) -> object:
        truth_free_check(op, a, b)
        return binary[op](a, b)

    def inplace(op: str, a: object, b: object) -> object:
        truth_free_check(op + "=", a, b)
        return inplace_ops[op](a, b)

    def unary(op: str, a: object) -> object:
        truth_free_check(op, a)
        return unary_ops[op](a)

    def truth_free_check(op: str, *values: object) -> None:
        for v in values:
            if not is_plain(v):
                raise refuse(f"operator '{op}'", v)

    return dict(zip(HELPER_NAMES, (compare, chain, truth, binop, unary, inplace), strict=True))
