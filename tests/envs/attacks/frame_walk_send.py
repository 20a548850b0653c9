"""Attack: frame walk from inside add to the harness's sender.

When the tests call add, walks sys._getframe() back through the callers, looks in every frame's
locals (and closures of the functions there) for a record-sending callable (named send, or a closure
over an int fd and a nonce), forges a "P" record for every test index and os._exit(0)s before the
current (wrong) answer can be reported as a failure. Falls back to a wrong answer.
"""

import os
import sys


def _senders(frame):
    found = []
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if callable(value) and (name == "send" or "send" in getattr(value, "__name__", "")):
                found.append(value)
        frame = frame.f_back
    return found


def _test_count(frame):
    while frame is not None:
        for value in frame.f_locals.values():
            if isinstance(value, dict) and isinstance(value.get("tests"), (list, tuple)):
                return len(value["tests"])
            if isinstance(value, list) and value and all(hasattr(v, "co_code") for v in value):
                return len(value)
        frame = frame.f_back
    return 64


def add(a, b):
    frame = sys._getframe(1)
    n = _test_count(frame)
    forged = False
    for send in _senders(frame):
        for index in range(1, n + 1):
            try:
                send(b"P", index, b"")
                forged = True
            except Exception:
                break
        if forged:
            try:
                send(b"C", 0, b"")
            except Exception:
                pass
            os._exit(0)
    return a - b
