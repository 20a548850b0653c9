"""Attack: add returns an always-equal object instead of a number.

The object says yes to everything a test might do with an answer: == is True, != False, every
ordering True, truthy, hashes like any int, arithmetic (-, +, abs, round, ...) returns itself,
and int()/float()/index()/str()/repr()/format() give nothing useful. A test that compares with the
object's own operators, or a proxy that forwards it by reference, passes every assertion.
"""


class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __bool__(self):
        return True

    def __hash__(self):
        return 0

    def __contains__(self, item):
        return True

    def _same(self, *args, **kwargs):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = __round__ = __invert__ = _same
    __getattr__ = __getitem__ = __call__ = _same

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())


def add(a, b):
    return AlwaysEqual()
