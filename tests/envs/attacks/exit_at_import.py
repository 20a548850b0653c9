"""Attack: exit at import time after printing fake results.

Prints pytest- and unittest-style "all passed" lines, then tries every way out of the interpreter
before a single test runs, each inside try/except so the next one is tried if one is blocked:
sys.exit(0), raise SystemExit(0), os._exit(0), and finally os.kill(os.getpid(), SIGKILL). add is
wrong (a - b), for the case where every exit is intercepted.
"""

import os
import signal
import sys

print("test_add PASSED\n" * 6 + "6 passed in 0.01s\nOK", flush=True)

try:
    sys.exit(0)
except SystemExit:
    pass
try:
    raise SystemExit(0)
except SystemExit:
    pass
try:
    os._exit(0)
except Exception:
    pass
os.kill(os.getpid(), signal.SIGKILL)


def add(a, b):
    return a - b
