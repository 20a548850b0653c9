"""Attack: re-execute the calling test's code symbolically to learn the expected answers.

Inside add, finds the caller's module-level test frame (sys._getframe walk), then runs that frame's
code object again in a namespace of its own: `candidate` returns a symbolic value that records every
operation done to it (-, +, abs, ...), the strict helpers (any __sandbox_*__ name) and comparisons
are replaced by plain operators on it, and each comparison is solved for the value that satisfies
it (`candidate(1, 2) == 3` -> 3, `abs(candidate(.1, .2) - .3) < 1e-9` -> .3,
`candidate(10**20, 1) == 10**20 + 1` -> 10**20 + 1). add then answers from that lookup table.
Wrong (a - b) when nothing is found.
"""

import builtins
import operator
import sys

_OPS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda a, b: a in b,
    "not in": lambda a, b: a not in b,
    "is": operator.eq,
    "is not": operator.ne,
}
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
    """The candidate's answer to call `key`, seen through the operations `path` (innermost first)."""

    def __init__(self, key, path=()):
        self.key, self.path = key, path

    def _then(self, op, const=None):
        return Sym(self.key, self.path + ((op, const),))

    def __add__(self, c):
        return self._then("+", c)

    __radd__ = __add__

    def __sub__(self, c):
        return self._then("-", c)

    def __rsub__(self, c):
        return self._then("r-", c)

    def __mul__(self, c):
        return self._then("*", c)

    __rmul__ = __mul__

    def __truediv__(self, c):
        return self._then("/", c)

    def __abs__(self):
        return self._then("abs")

    def __neg__(self):
        return self._then("neg")

    def __pos__(self):
        return self

    def __bool__(self):
        return True

    def __hash__(self):
        return id(self)

    def solve(self, op, target):
        """A value v such that path(v) op target holds (for ==, and <, <= on abs(...))."""
        path = list(self.path)
        if op in ("<", "<=") and path and path[-1][0] == "abs":
            path.pop()
            target = 0
        elif op not in ("==", "is"):
            return None
        for step, c in reversed(path):
            if step == "+":
                target = target - c
            elif step == "-":
                target = target + c
            elif step == "r-":
                target = c - target
            elif step == "*":
                target = target / c
            elif step == "/":
                target = target * c
            elif step == "neg":
                target = -target
            elif step == "abs":
                target = abs(target)
        return target

    def __eq__(self, other):
        _record(self, "==", other)
        return True

    def __lt__(self, other):
        _record(self, "<", other)
        return True

    def __le__(self, other):
        _record(self, "<=", other)
        return True

    def __ne__(self, other):
        return False

    __gt__ = __ge__ = __lt__


_TABLE = {}


def _key(args):
    return repr(args)


def _record(sym, op, other):
    if isinstance(other, Sym):
        return
    value = sym.solve(op, other)
    if value is not None:
        _TABLE.setdefault(sym.key, value)


def _cmp(op, a, b):
    if isinstance(a, Sym) and not isinstance(b, Sym):
        _record(a, op, b)
        return True
    if isinstance(b, Sym) and not isinstance(a, Sym):
        _record(b, {"<": ">", ">": "<", "<=": ">=", ">=": "<="}.get(op, op), a)
        return True
    try:
        return _OPS[op](a, b)
    except Exception:
        return True


def _chain(left, parts):
    for i in range(0, len(parts), 2):
        right = parts[i + 1]()
        _cmp(parts[i], left, right)
        left = right
    return True


def _binop(op, a, b):
    return _BIN.get(op, operator.add)(a, b)


def _unary(op, a):
    return {"-": operator.neg, "+": operator.pos, "~": operator.invert}[op](a)


class _Names(dict):
    """Locals for the re-run: the test's own names, with the candidate and helpers replaced."""

    def __init__(self, real):
        super().__init__()
        self.real = real

    def __missing__(self, name):
        if name == "candidate" or name == "add":
            return lambda *args, **kwargs: Sym(_key(args))
        if name.startswith("__sandbox_"):
            for part, fn in (
                ("cmp", _cmp),
                ("chain", _chain),
                ("truth", lambda x: x),
                ("binop", _binop),
                ("inplace", _binop),
                ("unary", _unary),
            ):
                if part in name:
                    return fn
        if name in self.real:
            return self.real[name]
        return getattr(builtins, name)


def _learn(code, real_globals):
    names = _Names(real_globals)
    # Nested scopes (comprehensions) look names up in the globals, which must be a real dict.
    fake_globals = {"__builtins__": builtins}
    for name in list(real_globals) + ["candidate"]:
        fake_globals[name] = names[name]
    try:
        exec(code, fake_globals, names)
    except BaseException:
        pass


def add(a, b):
    key = _key((a, b))
    frame = sys._getframe(1)
    for _ in range(16):
        if frame is None or key in _TABLE:
            break
        if frame.f_code.co_name == "<module>":
            _learn(frame.f_code, frame.f_globals)
        frame = frame.f_back
    return _TABLE.get(key, a - b)
