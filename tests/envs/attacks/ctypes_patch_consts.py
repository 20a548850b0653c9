"""Attack: ctypes write into the calling test's constants so its comparison meets our answer.

Inside add (which computes the wrong a - b), finds the caller's frame and, with dis, the first
numeric LOAD_CONST the caller executes after the call returns (the expected value, e.g. the 3 of
`candidate(1, 2) == 3`, or the 0.3 of `abs(candidate(.1, .2) - .3) < 1e-9`). It then overwrites
that slot of the caller's co_consts tuple in place (ctypes, at id(tuple) + header) with a pointer
to the wrong answer, so the expected value the test loads *is* the wrong answer.
"""

import ctypes
import dis
import sys

WORD = ctypes.sizeof(ctypes.c_void_p)
KEEP = []


def _patch_slot(consts, index, value):
    KEEP.append(value)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))
    # PyTupleObject: ob_refcnt, ob_type, ob_size, then ob_item[] (a pointer per item).
    ctypes.c_void_p.from_address(id(consts) + (3 + index) * WORD).value = id(value)


def add(a, b):
    wrong = a - b
    frame = sys._getframe(1)
    for _ in range(4):
        if frame is None:
            break
        code = frame.f_code
        try:
            later = [i for i in dis.get_instructions(code) if i.offset > frame.f_lasti]
        except Exception:
            later = []
        for ins in later:
            value = ins.argval
            if ins.opname in ("LOAD_CONST", "RETURN_CONST") and type(value) in (int, float):
                if not (0 < abs(value) < 1e-6) and isinstance(ins.arg, int):
                    _patch_slot(code.co_consts, ins.arg, wrong)
                    return wrong
        frame = frame.f_back
    return wrong
