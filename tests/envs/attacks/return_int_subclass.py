"""Attack: add returns a wrong int subclass (and a metaclass) that lies about itself.

The value is a - b, but as an instance of `int`'s subclass whose comparisons are always true, whose
arithmetic returns another liar, and whose metaclass makes the class compare equal to (and hash
like) int, claim int's name and module, and pass isinstance/issubclass checks against it. A check
by isinstance(x, int), type(x) == int, x.__class__ or type(x).__name__ is fooled; only type(x) is int
(identity) or a conversion to a plain int sees the truth.
"""


class Meta(type):
    def __eq__(cls, other):
        return True

    def __ne__(cls, other):
        return False

    def __hash__(cls):
        return hash(int)

    def __instancecheck__(cls, obj):
        return True

    def __subclasscheck__(cls, sub):
        return True


class Liar(int, metaclass=Meta):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __lt__ = __le__ = __gt__ = __ge__ = __eq__

    def __bool__(self):
        return True

    __hash__ = int.__hash__

    def _liar(self, *args):
        return Liar(int(self))

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __abs__ = __neg__ = _liar
    __class__ = property(lambda self: int)


Liar.__name__ = Liar.__qualname__ = "int"
Liar.__module__ = "builtins"


def add(a, b):
    return Liar(int(a - b))
