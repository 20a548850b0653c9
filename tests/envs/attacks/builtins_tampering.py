"""Attack: tamper with builtins, operator, sys.modules and __import__ before the tests run.

At import, in this interpreter: AssertionError (and its bases the harness might catch) become an
exception class nobody catches as failure; isinstance/issubclass/type/abs/len/round lie; operator's
comparisons (eq, ne, lt, ...) and truth always say yes; sys.modules entries for operator, math,
builtins, unittest and pytest are replaced with always-yes stand-ins; __import__ hands those
stand-ins out to any later import; every helper-looking name reachable from builtins is patched too.
add is wrong (a - b). Only code that looks its names up after the program ran is affected.
"""

import builtins
import operator
import sys
import types


class Yes:
    def __getattr__(self, name):
        return lambda *a, **k: True

    def __call__(self, *a, **k):
        return True


class Uncaught(BaseException):
    pass


_YES = lambda *a, **k: True  # noqa: E731

for _name in ("AssertionError", "Exception", "ArithmeticError", "TypeError", "ValueError"):
    setattr(builtins, _name, Uncaught)
builtins.isinstance = builtins.issubclass = builtins.callable = _YES
builtins.type = lambda *a: int
builtins.abs = lambda x: 0
builtins.round = lambda *a: 0
builtins.len = lambda x: 0
builtins.all = builtins.any = _YES

for _name in ("eq", "ne", "lt", "le", "gt", "ge", "is_", "is_not", "truth", "contains"):
    setattr(operator, _name, _YES)
    setattr(operator, f"__{_name.strip('_')}__", _YES)

_fake = {}
for _mod in ("operator", "_operator", "math", "unittest", "pytest", "builtins", "strict_operators"):
    _stub = types.ModuleType(_mod)
    _stub.__getattr__ = lambda name: _YES
    _fake[_mod] = _stub
    sys.modules[_mod] = _stub

_real_import = builtins.__import__


def _import(name, globals=None, locals=None, fromlist=(), level=0):
    if name in _fake:
        return _fake[name]
    return _real_import(name, globals, locals, fromlist, level)


builtins.__import__ = _import
for _name in dir(builtins):
    if _name.startswith("__sandbox_") or "assert" in _name.lower():
        setattr(builtins, _name, _YES)
for _name in ("__sandbox_cmp__", "__sandbox_chain__", "__sandbox_truth__", "__sandbox_binop__"):
    setattr(builtins, _name, _YES)
if isinstance(__builtins__, dict):
    __builtins__.update({k: getattr(builtins, k) for k in ("AssertionError", "isinstance", "abs")})


def add(a, b):
    return a - b
