"""The trusted side of a run: the setup and the tests, with the program's functions as proxies.

Child side, standard library only (harness.py says how its source arrives). The harness forks this
process after the program's process (worker.py) and gives it a uid of its own, the tests, the
result socket and its nonce; it holds no model code. Each test runs here with `candidate` (and any
other program global a test names) bound to a `Proxy`: a call sends the arguments over the call
channel as plain values and gets back a plain value, or an exception to raise, decoded by
wire.py. Every comparison, assert and truth test therefore runs in this process, on values of exact
builtin types, through the strict operators; nothing the program does in its own process can
change a test's outcome except the values it returns.

Exit status: 0 when the run ended normally (every test reported, or the program failed to load),
3 when the program's process went away mid-run (the harness then reports how it ended, as before).
"""

from __future__ import annotations

import builtins
import marshal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # The harness runs this module in a namespace that already holds wire.py's names.
    from orchestry.envs.code.sandbox.wire import (
        ChannelClosed,
        WireError,
        decode,
        encode,
        recv_reply,
        send_request,
    )

WORKER_GONE = 3


class WorkerGone(BaseException):
    """The program's process closed the channel or broke the protocol: no more answers."""


class UntrustedValue(Exception):
    """The program returned a value that is not plain (so it cannot cross to the tests)."""


class Channel:
    """The checker's end of the call channel; `gone` once the worker closed it or broke protocol."""

    def __init__(self, fd: int):
        self.fd = fd
        self.gone = False

    def ask(self, request: list[object]) -> list[object]:
        """Send one request and return its answer; WorkerGone once the worker is gone."""
        if self.gone:
            raise WorkerGone("the program's process is gone")
        try:
            send_request(self.fd, request)
            reply = recv_reply(self.fd)
        except (ChannelClosed, OSError) as exc:
            self.gone = True
            raise WorkerGone(str(exc)) from None
        except WireError as exc:
            self.gone = True
            raise WorkerGone(f"protocol error: {exc}") from None
        if type(reply) is not list or not reply or type(reply[0]) is not str:
            self.gone = True
            raise WorkerGone("protocol error: a malformed answer")
        return reply


def remote_error(name: object, text: object) -> BaseException:
    """An exception that describes itself exactly as the program's did ('Name: text').

    Its class is named like the program's and derives from the builtin exception of that name when
    there is one (so `except ValueError` in a test still works), else from Exception.
    """
    name = name if type(name) is str and name else "Exception"
    text = text if type(text) is str else ""
    base = getattr(builtins, name, None)
    if not (isinstance(base, type) and issubclass(base, BaseException)):
        base = Exception
    if issubclass(base, BaseExceptionGroup) or base is WorkerGone:
        base = Exception
    cls = type(name, (base,), {"__str__": lambda self: self.remote_text})
    exc = cls.__new__(cls)
    exc.remote_text = text
    return exc


class Proxy:
    """A function of the program, called through the channel: plain values in, plain values out."""

    __slots__ = ("_ask", "_handle", "_name")

    def __init__(self, ask: Callable[[list[object]], list[object]], handle: int, name: str):
        self._ask, self._handle, self._name = ask, handle, name

    def __repr__(self) -> str:
        return f"<function {self._name} (in the program's process)>"

    def __call__(self, *args: object, **kwargs: object) -> object:
        ask = self._ask

        def proxy(handle: int) -> Proxy:
            return Proxy(ask, handle, "<returned function>")

        def handle_of(value: object) -> int:
            if type(value) is Proxy:
                return value._handle
            raise TypeError(f"only the program's own functions can be passed to {self._name}")

        request = [
            "call",
            self._handle,
            [encode(a, handle_of) for a in args],
            [[k, encode(v, handle_of)] for k, v in kwargs.items()],
        ]
        reply = ask(request)
        kind = reply[0]
        try:
            if kind == "ok" and len(reply) == 2:
                return decode(reply[1], proxy)
            if kind == "raise" and len(reply) == 3:
                raise remote_error(reply[1], reply[2])
            if kind == "plain" and len(reply) == 2:
                got = reply[1] if type(reply[1]) is str else "?"
                raise UntrustedValue(
                    f"{self._name} returned an object of a class named {got[:100]!r}, "
                    "not a plain value"
                )
        except WireError as exc:
            raise UntrustedValue(f"{self._name} returned a malformed value: {exc}") from None
        raise WorkerGone("protocol error: an unknown answer")


def bind_globals(ask, names: list[str]) -> tuple[dict[str, object], set[str]]:
    """(the program globals the tests name, bound here, and every such name the program defines).

    Functions become proxies, plain values are copied, stdlib modules are imported here; anything
    else (a class instance, a third-party module) stays unbound.
    """
    bound: dict[str, object] = {}
    defined: set[str] = set()
    reply = ask(["look", names])
    if reply[0] != "ok" or len(reply) != 2 or type(reply[1]) is not list:
        raise WorkerGone("protocol error: a malformed answer to look")
    for item in reply[1]:
        if type(item) is not list or len(item) != 3 or item[0] not in names:
            raise WorkerGone("protocol error: a malformed answer to look")
        name, kind, payload = item
        defined.add(name)
        if kind == "call" and type(payload) is int:
            bound[name] = Proxy(ask, payload, name)
        elif kind == "value":
            try:
                bound[name] = decode(payload, lambda h, name=name: Proxy(ask, h, name))
            except WireError:
                continue
        elif kind == "module" and type(payload) is str:
            top = payload.partition(".")[0]
            if top in sys.stdlib_module_names and not top.startswith("_"):
                try:
                    __import__(payload)
                    bound[name] = sys.modules[payload]
                except ImportError:
                    continue
    return bound, defined


def run_checks(fd: int, job: dict[str, object], send, describe, helpers) -> int:
    """Wait for the program to load, run the setup and each test; one record per outcome."""
    channel = Channel(fd)
    ask = channel.ask
    encode_text = str.encode
    try:
        first = recv_reply(fd)
        status = recv_reply(fd) if first == ["ready"] else first
    except (ChannelClosed, WireError, OSError):
        return WORKER_GONE
    if first != ["ready"]:
        text = first[1] if type(first) is list and len(first) == 2 else "no ready message"
        send(
            b"E", 0, encode_text(f"the program's process did not start: {text}", "utf-8", "replace")
        )
        return 0
    if type(status) is not list or not status or status[0] not in ("loaded", "syntax", "load"):
        send(b"L", 0, b"ProtocolError: a malformed load status")
        return 0
    if status[0] != "loaded":
        kind = b"S" if status[0] == "syntax" else b"L"
        text = status[1] if len(status) == 2 and type(status[1]) is str else ""
        send(kind, 0, encode_text(text[:1000], "utf-8", "replace"))
        return 0

    # Hardened and compiled by the parent (hardening.py, runner.py).
    setup = marshal.loads(job["setup"])
    tests = [marshal.loads(t) for t in job["tests"]]
    entry_point = job["entry_point"]
    names = [n for n in job["names"] if entry_point is None or n != "candidate"]
    if entry_point is not None and entry_point not in names:
        names.append(entry_point)
    try:
        base_ns, defined = bind_globals(ask, names)
    except WorkerGone:
        return WORKER_GONE
    if entry_point is not None:
        if entry_point not in defined:
            missing = f"NameError: entry point {entry_point!r} is not defined"
            send(b"L", 0, encode_text(missing, "utf-8", "replace"))
            return 0
        # An entry point that is neither a function nor a plain value stays None: tests fail.
        base_ns["candidate"] = base_ns.get(entry_point)
    pristine_builtins = dict(vars(builtins))
    base_ns["__name__"] = "__tests__"
    base_ns["__builtins__"] = dict(pristine_builtins)
    base_ns.update(helpers)
    try:
        exec(setup, base_ns)
    except BaseException as exc:
        if channel.gone:
            return WORKER_GONE
        send(b"L", 0, b"setup: " + describe(exc))
        return 0
    for index, test in enumerate(tests, 1):
        test_ns = dict(base_ns)
        test_ns["__builtins__"] = dict(pristine_builtins)
        test_ns.update(helpers)
        try:
            exec(test, test_ns)
        except BaseException as exc:
            if channel.gone:
                return WORKER_GONE
            send(b"F", index, describe(exc))
        else:
            # A test that swallowed the worker's end proves nothing: no record, as when the
            # program's process took the tests down with it.
            if channel.gone:
                return WORKER_GONE
            send(b"P", index, b"")
    send(b"C", 0, b"")
    return 0
