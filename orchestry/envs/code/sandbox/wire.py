"""The call channel between the checker and the program's process: frames and plain values.

Child side, standard library only, like harness.py: the parent sends this file's source in the job
and the harness runs it (as root, before isolation and before any untrusted code) into a namespace
of its own; the checker and the worker get its functions from there. The parent and the tests may
also import it as an ordinary module.

A frame is a 4-byte big-endian length and that many bytes: a request of the checker is marshal'd
(only the worker decodes it); a reply of the worker is JSON, which the checker parses with the
standard parser. A *value* travels as JSON-compatible lists, tagged so that only plain builtin
values can come out of `decode`:

- a str is a JSON string, None/True/False are null/true/false;
- everything else is a JSON array whose first item is a tag: ``["i", hex]`` int, ``["f", hex]``
  float (`float.hex`, exact, inf and nan included), ``["c", hex, hex]`` complex, ``["b", hex]``
  bytes, ``["l", [...]]`` list, ``["t", [...]]`` tuple, ``["s", [...]]`` set, ``["fs", [...]]``
  frozenset, ``["d", [[k, v], ...]]`` dict, ``["r", start, stop, step]`` range and ``["h", n]`` a
  handle: a callable that stays in the program's process and is called through the channel.

`decode` is the trusted side's gate: it builds values of exact builtin types from JSON, never calls
anything the other side chose, and turns anything it does not know into WireError.
"""

from __future__ import annotations

import _json
import marshal
import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_FRAME = 64 * 1024 * 1024
"""Longest frame either side accepts (64 MiB): a bigger reply is a protocol error, not a hang."""

_LENGTH = struct.Struct(">I")
_CONTAINERS = {"l": list, "t": tuple, "s": set, "fs": frozenset}
# Bound once, before any program runs, so a program that patches os, json or marshal in its own
# process does not break its answers (these modules' namespaces get a builtins of their own).
_write, _read = os.write, os.read
_marshal_dumps, _marshal_loads = marshal.dumps, marshal.loads
# The C parts of the json module: importing json itself would import re, which every run pays.
_quote = _json.encode_basestring_ascii


class _ScannerSettings:
    """What `_json.make_scanner` reads: standard JSON, no hooks, no NaN or Infinity."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"{name} is not allowed")


_scan = _json.make_scanner(_ScannerSettings())


class WireError(Exception):
    """A frame or a value that breaks the protocol: the call fails, nothing else happens."""


class ChannelClosed(Exception):
    """The other side closed the channel (or died) before a whole frame arrived."""


def _send(fd: int, data: bytes) -> None:
    if len(data) > MAX_FRAME:
        raise WireError(f"a message of {len(data)} bytes is over the {MAX_FRAME}-byte limit")
    view = memoryview(_LENGTH.pack(len(data)) + data)
    while view:
        view = view[_write(fd, view) :]


def _recv(fd: int) -> bytes:
    (length,) = _LENGTH.unpack(_read_exactly(fd, 4))
    if length > MAX_FRAME:
        raise WireError(f"a frame of {length} bytes is over the {MAX_FRAME}-byte limit")
    return _read_exactly(fd, length)


def _read_exactly(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = _read(fd, min(n, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other side closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def send_request(fd: int, message: object) -> None:
    """Checker to worker: marshal (only the worker, which trusts nothing anyway, decodes it)."""
    _send(fd, _marshal_dumps(message))


def recv_request(fd: int) -> object:
    """Worker side: one request of the checker."""
    return _marshal_loads(_recv(fd))


def send_reply(fd: int, message: object) -> None:
    """Worker to checker: JSON, written by `_json` with nothing a program could have patched."""
    _send(fd, _to_json(message).encode())


def recv_reply(fd: int) -> object:
    """Checker side: one reply, parsed as JSON; WireError when it is not JSON."""
    data = _recv(fd)
    try:
        text = data.decode("ascii")
        value, end = _scan(text, 0)
    except (ValueError, RecursionError, StopIteration) as exc:
        raise WireError(f"a frame is not valid JSON: {type(exc).__name__}") from None
    if end != len(text):
        raise WireError("a frame is not valid JSON: extra data")
    return value


def _to_json(message: object) -> str:
    """JSON text of a message made of lists, str, int, bool and None (all a reply holds)."""
    if message is None:
        return "null"
    if message is True:
        return "true"
    if message is False:
        return "false"
    t = type(message)
    if t is str:
        return _quote(message)
    if t is int:
        return int.__repr__(message)
    if t is list:
        return "[" + ",".join([_to_json(item) for item in message]) + "]"
    raise TypeError(f"a reply cannot hold a {t.__name__}")


def encode(value: object, handle: Callable[[object], int] | None = None) -> object:
    """The tagged JSON form of a plain value; callables become handles when `handle` is given.

    Types are matched exactly (no subclasses); anything else raises TypeError naming the type.
    """
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return ["i", hex(value)]
    if t is float:
        return ["f", value.hex()]
    if t is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if t is bytes:
        return ["b", value.hex()]
    if t is list or t is tuple or t is set or t is frozenset:
        tag = {list: "l", tuple: "t", set: "s", frozenset: "fs"}[t]
        return [tag, [encode(item, handle) for item in value]]
    if t is dict:
        return ["d", [[encode(k, handle), encode(v, handle)] for k, v in value.items()]]
    if t is range:
        return ["r", hex(value.start), hex(value.stop), hex(value.step)]
    if handle is not None and callable(value):
        return ["h", handle(value)]
    raise TypeError(f"a value of type {t.__name__} cannot cross the sandbox boundary")


def _int(text: object) -> int:
    if type(text) is not str or len(text) > 1 << 22:
        raise WireError("a malformed int")
    return int(text, 16)


def _float(text: object) -> float:
    if type(text) is not str or len(text) > 64:
        raise WireError("a malformed float")
    return float.fromhex(text)


def decode(obj: object, proxy: Callable[[int], object] | None = None) -> object:
    """The plain value a tagged JSON form stands for; `proxy(n)` stands in for handle n.

    Raises WireError for anything malformed (unknown tags, unhashable set members or dict keys).
    """
    t = type(obj)
    if obj is None or t is bool or t is str:
        return obj
    if t is not list or not obj or type(obj[0]) is not str:
        raise WireError(f"a malformed value of JSON type {t.__name__}")
    tag, args = obj[0], obj[1:]
    try:
        if tag == "i" and len(args) == 1:
            return _int(args[0])
        if tag == "f" and len(args) == 1:
            return _float(args[0])
        if tag == "c" and len(args) == 2:
            return complex(_float(args[0]), _float(args[1]))
        if tag == "b" and len(args) == 1 and type(args[0]) is str:
            return bytes.fromhex(args[0])
        if tag in _CONTAINERS and len(args) == 1 and type(args[0]) is list:
            return _CONTAINERS[tag](decode(item, proxy) for item in args[0])
        if tag == "d" and len(args) == 1 and type(args[0]) is list:
            return dict(_pair(item, proxy) for item in args[0])
        if tag == "r" and len(args) == 3:
            return range(_int(args[0]), _int(args[1]), _int(args[2]))
        if tag == "h" and len(args) == 1 and type(args[0]) is int and proxy is not None:
            return proxy(args[0])
    except (TypeError, ValueError, OverflowError) as exc:
        raise WireError(f"a malformed {tag!r} value: {type(exc).__name__}") from None
    raise WireError(f"an unknown value tag {tag[:20]!r}")


def _pair(item: object, proxy: Callable[[int], object] | None) -> tuple[object, object]:
    if type(item) is not list or len(item) != 2:
        raise WireError("a malformed dict item")
    return decode(item[0], proxy), decode(item[1], proxy)


def explain(exc: BaseException) -> tuple[str, str]:
    """(type name, message) of an exception, robust to hostile __str__ and metaclasses."""
    name = type.__dict__["__name__"].__get__(type(exc))
    try:
        text = str(exc)
    except BaseException:
        text = "<exception message could not be formatted>"
    if type(name) is not str:
        name = "Exception"
    if type(text) is not str:
        text = "<exception message could not be formatted>"
    return name[:200], text[:500]
