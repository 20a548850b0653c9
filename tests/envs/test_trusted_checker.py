"""The trusted checker: the wire format, and what tests see of a program that runs elsewhere."""

from __future__ import annotations

import math
import os
import re

import pytest
from conftest import limits

from orchestry.envs.code.sandbox import SandboxJob, TestReport, run_tests_in_sandbox, wire
from orchestry.envs.code.sandbox.runner import program_names

LIMITS = limits(timeout_s=10.0, cpu_s=5, memory_mb=256)


def run(program: str, *tests: str, entry_point: str | None = "f", setup: str = "") -> TestReport:
    return run_tests_in_sandbox(SandboxJob(program, tests, setup, entry_point), LIMITS)


# --- the wire format ----------------------------------------------------------------------------

PLAIN = [
    None,
    True,
    False,
    0,
    -(10**400),
    2**64 + 1,
    1.5,
    -0.0,
    math.inf,
    -math.inf,
    1e-310,
    3 + 4j,
    "",
    "héllo \ud800 \x00 \"'",
    b"\x00\xff",
    [1, [2, [3]]],
    (1, "a", (None,)),
    {1, "x", (2, 3)},
    frozenset({1.5}),
    {"k": [1, 2], 3: {"n": None}, (1, 2): frozenset()},
    range(1, 10, 3),
]


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_values_cross_the_wire_exactly(value: object) -> None:
    back = wire.decode(wire.encode(value))
    assert type(back) is type(value) and back == value
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)


def test_nan_crosses_the_wire() -> None:
    assert math.isnan(wire.decode(wire.encode(math.nan)))


def test_values_that_are_not_plain_are_refused_by_encode() -> None:
    class Int(int):
        pass

    for value in (Int(3), object(), [1, Int(2)], {"k": object()}, (x for x in ()), ...):
        with pytest.raises(TypeError, match="cannot cross"):
            wire.encode(value)


@pytest.mark.parametrize(
    "forged",
    [
        {"i": "0x1"},
        ["zz", 1],
        ["i", 5],
        ["i", "0x1", "0x2"],
        ["f", "nan-ish"],
        ["s", [["l", []]]],
        ["d", [[["l", []], 1]]],
        ["d", [[1]]],
        ["h", 0],
        [],
        1.5,
        7,
    ],
    ids=repr,
)
def test_decode_turns_anything_malformed_into_a_wire_error(forged: object) -> None:
    with pytest.raises(wire.WireError):
        wire.decode(forged)


def test_a_reply_that_is_not_json_is_a_wire_error() -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb", buffering=0) as r, os.fdopen(write, "wb", buffering=0) as w:
        for body in (b"NaN", b"[1]x", b"\xff", b"[" * 30_000):  # fits the pipe
            w.write(len(body).to_bytes(4, "big") + body)
            with pytest.raises(wire.WireError):
                wire.recv_reply(r.fileno())


def test_program_names_are_what_the_tests_read_minus_builtins() -> None:
    names = program_names("import math\nLIMIT = 3", ("assert aux(LIMIT) == len('ab')",), "f")
    assert names == ["LIMIT", "aux", "f"]


# --- what a test sees of the program ------------------------------------------------------------


def test_helper_tests_reach_the_program_function_by_name() -> None:
    r = run(
        "def aux(x):\n    return x * 2\n",
        "assert aux(2) == 4",
        "assert aux(3) == 7",
        entry_point=None,
        setup="import math",
    )
    assert r.passed == (True, False)


def test_program_constants_and_returned_functions_reach_the_tests() -> None:
    program = "LIMIT = 3\ndef f(n):\n    return lambda x: x + n\n"
    r = run(program, "assert candidate(LIMIT)(1) == 4", "assert candidate(1)(candidate(1)(0)) == 2")
    assert r.passed == (True, True)


def test_exceptions_keep_their_class_and_their_text() -> None:
    program = (
        "class Odd(Exception):\n    pass\n"
        "def f(x):\n"
        "    if x < 0:\n        raise ValueError('negative')\n"
        "    if x == 1:\n        raise Odd('one')\n"
        "    return {}['missing']\n"
    )
    expects_value_error = (
        "try:\n    candidate(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False"
    )
    r = run(program, expects_value_error, "candidate(1)", "candidate(2)", "candidate(-1)")
    assert r.passed == (True, False, False, False)
    r2 = run(program, "candidate(2)")
    assert r2.first_failure == "test 1: KeyError: 'missing'"
    r3 = run(program, "candidate(1)")
    assert r3.first_failure == "test 1: Odd: one"


def test_a_generator_or_an_instance_does_not_cross() -> None:
    program = (
        "def f(kind):\n    if kind:\n        return (i for i in range(3))\n    return object()\n"
    )
    r = run(program, "assert list(candidate(1)) == [0, 1, 2]", "assert candidate(0) is not None")
    assert r.passed == (False, False)
    assert "not a plain value" in (r.first_failure or "")


def test_a_program_global_cannot_shadow_a_builtin_in_the_tests() -> None:
    """The old harness let `sorted` of the program answer for the test's own `sorted`."""
    program = "def sorted(xs):\n    return [1, 2, 3]\ndef f():\n    return [9]\n"
    assert run(program, "assert sorted(candidate()) == [1, 2, 3]").passed == (False,)


def test_tests_run_under_another_uid_than_the_program() -> None:
    program = "import os\nprint('worker', os.getuid())\ndef f():\n    return 1\n"
    r = run(program, "assert candidate() == 1", setup="import os\nprint('checker', os.getuid())")
    assert r.passed == (True,)
    uids = dict(re.findall(r"(worker|checker) (\d+)", r.output))
    assert set(uids) == {"worker", "checker"} and uids["worker"] != uids["checker"]
    assert "0" not in uids.values()


def test_the_tests_never_enter_the_programs_memory() -> None:
    """The program reads every readable page of its own memory looking for the test's text.

    It looks for the marker in two halves made from their hex forms, so that neither its code nor
    its search ever holds the whole marker; the first half must be followed by the second."""
    marker = "Zq" + "x7" * 12
    head, tail = marker[:13].encode().hex(), marker[13:].encode().hex()
    program = (
        "import ctypes\n"
        "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/mem readable\n"
        f"head, tail = bytes.fromhex({head!r}), bytes.fromhex({tail!r})\n"
        "found = False\n"
        "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
        "    for line in maps:\n"
        "        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "        if 'r' not in line.split()[1] or hi - lo > 1 << 28:\n"
        "            continue\n"
        "        try:\n"
        "            mem.seek(lo)\n"
        "            data = mem.read(hi - lo)\n"
        "        except OSError:\n"
        "            continue\n"
        "        at = data.find(head)\n"
        "        while at >= 0 and not found:\n"
        "            found = data[at + len(head) : at + len(head) + len(tail)] == tail\n"
        "            at = data.find(head, at + 1)\n"
        "print('FOUND' if found else 'NOT FOUND')\n"
        "def f():\n    return 0\n"
    )
    r = run(program, f"assert candidate() != {marker!r}")
    assert r.passed == (True,)
    assert "NOT FOUND" in r.output


def test_a_test_that_swallows_the_programs_exit_does_not_pass() -> None:
    program = "import os\ndef f(x):\n    if x:\n        os._exit(0)\n    return 0\n"
    swallow = "try:\n    candidate(1)\nexcept BaseException:\n    pass"
    r = run(program, "assert candidate(0) == 0", swallow, "assert candidate(0) == 0")
    assert r.passed == (True, False, False)
    assert r.first_failure == "test 2: no result (the program's process ended early: exit code 0)"
