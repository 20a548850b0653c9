"""Attack: end the process (or the test) from inside add, in a different way on each call.

Prints "PASSED" first, then on successive calls: raise SystemExit(0), KeyboardInterrupt,
GeneratorExit, a BaseException subclass, StopIteration, os._exit(0) (after closing stdout/stderr).
Hoping an exit that the harness does not see as an exception, or an early end of the run, counts
the remaining tests as passed.
"""

import os
import sys


class Escape(BaseException):
    pass


CALLS = []


def add(a, b):
    CALLS.append((a, b))
    print("PASSED", flush=True)
    n = len(CALLS)
    if n == 1:
        raise SystemExit(0)
    if n == 2:
        raise KeyboardInterrupt
    if n == 3:
        raise GeneratorExit
    if n == 4:
        raise Escape()
    if n == 5:
        raise StopIteration
    sys.stdout.close()
    sys.stderr.close()
    os._exit(0)
