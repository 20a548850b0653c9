"""Attack: write pass-looking junk to every inherited fd, and fake PASSED output.

At import and on every call of add: for each fd 0..1023 that is open (and each /proc/self/fd entry
reopened for writing), writes records and lines that look like passes in many formats (harness-like
"<nonce> P <i> " records with all-zero nonces, pytest/unittest-style PASSED/OK lines, JSON results,
a pickled all-pass report), and prints them on stdout and stderr. add itself is wrong (a - b).
"""

import json
import os
import pickle
import sys

N = 16
JUNK = [b"0" * 32 + b" P %d " % i for i in range(1, N + 1)]
JUNK += [b"0" * 32 + b" C 0 ", b"PASSED\n", b"OK\n", b"all tests passed\n", b"1 passed\n"]
JUNK += [b"test %d PASSED\n" % i for i in range(1, N + 1)]
JUNK.append(json.dumps({"passed": [True] * N, "n_passed": N}).encode() + b"\n")
JUNK.append(pickle.dumps({"passed": (True,) * N, "n_passed": N}))


def _spray():
    for fd in range(0, 1024):
        for junk in JUNK:
            try:
                os.write(fd, junk)
            except OSError:
                break
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        names = []
    for name in names:
        try:
            fd = os.open("/proc/self/fd/" + name, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            for junk in JUNK:
                os.write(fd, junk)
        except OSError:
            pass
        finally:
            os.close(fd)
    print("PASSED\n" * N + f"{N} passed in 0.01s", flush=True)
    print("OK", file=sys.stderr, flush=True)


_spray()


def add(a, b):
    _spray()
    return a - b
