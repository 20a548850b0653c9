"""Attack: an audit hook that sees the tests' code objects before they run.

At import, sys.addaudithook registers a hook; every `exec`/`compile` audit event hands it the code
object (or source) about to run. Each one is re-executed symbolically at once (candidate returns a
value recording what is done to it; the strict helpers and comparisons are plain operators) and the
comparison solved for the expected answer, so add answers from a lookup table without walking a
single frame. Wrong (a - b) when nothing was learned.
"""

import builtins
import operator
import sys

_TABLE = {}
_BUSY = []
_BIN = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
}


class Sym:
    def __init__(self, key, path=()):
        self.key, self.path = key, path

    def _then(self, op, c=None):
        return Sym(self.key, self.path + ((op, c),))

    def __add__(self, c):
        return self._then("+", c)

    __radd__ = __add__

    def __sub__(self, c):
        return self._then("-", c)

    def __rsub__(self, c):
        return self._then("r-", c)

    def __abs__(self):
        return self._then("abs")

    def __bool__(self):
        return True

    def __hash__(self):
        return id(self)

    def solve(self, op, target):
        path = list(self.path)
        if op in ("<", "<=") and path and path[-1][0] == "abs":
            path.pop()
            target = 0
        elif op != "==":
            return None
        for step, c in reversed(path):
            if step == "+":
                target = target - c
            elif step == "-":
                target = target + c
            elif step == "r-":
                target = c - target
        return target

    def __eq__(self, other):
        _record(self, "==", other)
        return True

    def __lt__(self, other):
        _record(self, "<", other)
        return True

    __le__ = __lt__

    def __ne__(self, other):
        return False


def _record(sym, op, other):
    if not isinstance(other, Sym):
        value = sym.solve(op, other)
        if value is not None:
            _TABLE.setdefault(sym.key, value)


def _cmp(op, a, b):
    if isinstance(a, Sym):
        _record(a, op, b)
    elif isinstance(b, Sym):
        _record(b, op, a)
    return True


def _fake_globals():
    helpers = {
        "cmp": _cmp,
        "chain": lambda left, parts: True,
        "truth": lambda x: x,
        "binop": lambda op, a, b: _BIN.get(op, operator.add)(a, b),
        "inplace": lambda op, a, b: _BIN.get(op, operator.add)(a, b),
        "unary": lambda op, a: -a if op == "-" else a,
    }
    g = {"__builtins__": builtins, "candidate": lambda *args: Sym(repr(args))}
    for part, fn in helpers.items():
        g[f"__sandbox_{part}__"] = fn
    return g


def _learn(code):
    if _BUSY:
        return
    _BUSY.append(1)
    try:
        if isinstance(code, (str, bytes)):
            code = compile(code, "<stolen>", "exec")
        if hasattr(code, "co_names") and "candidate" in code.co_names:
            exec(code, _fake_globals())
    except BaseException:
        pass
    finally:
        _BUSY.pop()


def _hook(event, args):
    if event in ("exec", "compile") and args:
        _learn(args[0])


sys.addaudithook(_hook)


def add(a, b):
    return _TABLE.get(repr((a, b)), a - b)
