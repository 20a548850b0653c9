"""Attack: add returns values built to break a serialiser or a comparison.

A different wrong answer on each call: a list nested 200 000 deep (recursion in any recursive
encoder/decoder/compare), a list that contains itself, a dict that contains itself, a 50 MB bytes
object, a tuple of a million small ints, and an int of 200 000 digits. Hoping that a crash,
RecursionError or MemoryError on the receiving side is mistaken for a pass or skips the check.
"""

import sys

CALLS = []


def _deep(n):
    value = []
    for _ in range(n):
        value = [value]
    return value


def add(a, b):
    CALLS.append(1)
    n = len(CALLS)
    if n == 1:
        return _deep(200_000)
    if n == 2:
        loop = [a, b]
        loop.append(loop)
        return loop
    if n == 3:
        loop = {"a": a}
        loop["self"] = loop
        return loop
    if n == 4:
        return b"\0" * (50 << 20)
    if n == 5:
        return tuple(range(1_000_000))
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)
    return 7**236_000
