"""The process that runs model code: it loads the program, then only answers calls.

Child side, standard library only (harness.py says how its source arrives). The harness forks this
process before it has read the tests, drops it to a uid of its own and leaves it one file
descriptor besides stdout and stderr: its end of the call channel. The tests, their expected
values, the result socket and its nonce never exist in this process, so nothing the program does
here (walk frames, scan `gc`, write memory through ctypes, start threads, write to fds) can read an
expected value or report a pass: all it can do is answer the checker's calls, and every answer is
decoded on the checker's side as a plain value (wire.py).

Messages on the channel (frames of wire.py), all answered in order:

- the worker first sends ``["ready"]`` (privileges dropped; nothing untrusted has run) and then one
  load status: ``["loaded"]``, ``["syntax", text]`` or ``["load", text]``;
- ``["look", [name, ...]]`` asks what the program's globals hold under those names; the answer
  lists ``[name, kind, payload]`` with kind ``call`` (payload a handle), ``value`` (payload a
  wire value), ``module`` (payload the module's name) or ``other`` (payload the type's name);
- ``["call", handle, [arg, ...], [[key, arg], ...]]`` calls a handle; the answer is ``["ok",
  value]``, ``["raise", type name, message]`` or ``["plain", type name]`` when the return value
  is not a plain value.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # The harness runs this module in a namespace that already holds wire.py's names.
    from orchestry.envs.code.sandbox.wire import (
        ChannelClosed,
        decode,
        encode,
        explain,
        recv_request,
        send_reply,
    )


def load_program(source: str, send: Callable[[object], None]) -> dict[str, object] | None:
    """Compile and run the program in a module of its own; its globals, or None after a failure."""
    import builtins
    import sys

    try:
        code = compile(source, "<program>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        send(["syntax", f"line {exc.lineno}: {exc.msg}"])
        return None
    except (ValueError, MemoryError, RecursionError) as exc:
        send(["syntax", ": ".join(part for part in explain(exc) if part)])
        return None
    # The program gets a module of its own, registered as __main__ so `import __main__` cannot
    # reach the harness; its name is not "__main__", so an `if __name__ == "__main__":` demo
    # block (often reading input()) does not run, as in the usual HumanEval-style harnesses.
    solution = type(sys)("__solution__")
    namespace = solution.__dict__
    namespace["__builtins__"] = dict(vars(builtins))
    sys.modules["__main__"] = solution
    try:
        exec(code, namespace)
    except BaseException as exc:
        send(["load", ": ".join(part for part in explain(exc) if part)])
        return None
    send(["loaded"])
    return namespace


def serve(fd: int, source: str) -> None:
    """Load the program, then answer calls until the checker closes the channel."""
    handles: list[Callable[..., object]] = []

    def handle(fn: object) -> int:
        handles.append(fn)
        return len(handles) - 1

    def send(message: object) -> None:
        send_reply(fd, message)

    namespace = load_program(source, send)
    if namespace is None:
        return
    while True:
        try:
            request = recv_request(fd)
        except ChannelClosed:
            return
        send(answer(request, namespace, handle, handles))


def _describe_global(name: str, namespace: dict[str, object], handle) -> list[object]:
    import sys

    value = namespace[name]
    if type(value) is type(sys):
        module_name = getattr(value, "__name__", "")
        return [name, "module", module_name if type(module_name) is str else ""]
    if callable(value):
        return [name, "call", handle(value)]
    try:
        return [name, "value", encode(value, handle)]
    except BaseException:
        return [name, "other", type(value).__name__]


def answer(request: object, namespace: dict[str, object], handle, handles) -> list[object]:
    """The answer to one request of the checker (see the module docstring)."""
    kind = request[0]
    if kind == "look":
        names = [n for n in request[1] if type(n) is str and n in namespace]
        return ["ok", [_describe_global(n, namespace, handle) for n in names]]
    _, index, args, kwargs = request
    fn = handles[index]
    try:
        positional = [decode(a, handles.__getitem__) for a in args]
        keywords = {k: decode(v, handles.__getitem__) for k, v in kwargs}
        result = fn(*positional, **keywords)
    except BaseException as exc:
        return ["raise", *explain(exc)]
    try:
        return ["ok", encode(result, handle)]
    except BaseException:
        return ["plain", type(result).__name__]
