"""One helper primitive: a small function of one or two values that the helper agent writes as `aux`.

A primitive is data, not code that runs here: its body is Python source, rendered into a full `def`
(under the name `aux` for the helper, under its own name when main carries it out as its own step).
Each primitive also carries a WRONG body: a plausible bug (a boundary, a sign, a case) that a good
set of tests must catch; the generator drops a problem whose tests let the wrong body pass.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

KINDS: tuple[str, ...] = ("predicate", "transform", "key", "combiner")
"""predicate: T -> bool; transform: T -> T (or another type); key: T -> a value to sort or group by;
combiner: (T, T) -> T."""

TYPES: tuple[str, ...] = ("int", "str")
"""Element types: integers, and strings (words, or single characters in the per-character family)."""

# The parameter names of a primitive's def, by element type and arity.
_PARAMS = {("int", 1): ("n",), ("str", 1): ("s",), ("int", 2): ("a", "b"), ("str", 2): ("a", "b")}


@dataclass(frozen=True)
class Primitive:
    """A helper function: its name, what it returns in words, its types, its body and a wrong body."""

    name: str
    """Its own name (an identifier): the primitive's part of a problem id."""
    kind: str
    """One of KINDS."""
    in_type: str
    """The type of each argument, one of TYPES."""
    out_type: str
    """The annotation of its result ("bool" for predicates)."""
    phrase: str
    """What it returns, in plain English, over the parameter names in braces: `{n} is even`
    (predicates: a condition), `the square of {n}`, `the larger of {a} and {b}`."""
    body: str
    """The function's body: Python statements over the parameter names (n / s / a, b)."""
    wrong: str
    """A wrong body: close to the right one, differing on some inputs."""
    short: str = ""
    """The word used in main's name (`count_even`); defaults to the name without `is_`."""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name == "aux":
            raise ValueError(f"primitive {self.name!r}: name must be an identifier other than aux")
        if self.kind not in KINDS:
            raise ValueError(f"primitive {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.in_type not in TYPES:
            raise ValueError(f"primitive {self.name!r}: in_type {self.in_type!r} not in {TYPES}")
        if (self.kind == "predicate") != (self.out_type == "bool"):
            raise ValueError(f"primitive {self.name!r}: predicates, and only they, return bool")

    @property
    def params(self) -> tuple[str, ...]:
        """The parameter names of its def."""
        return _PARAMS[(self.in_type, 2 if self.kind == "combiner" else 1)]

    @property
    def word(self) -> str:
        """Its word in main's name: `short`, or the name without a leading `is_`."""
        return self.short or self.name.removeprefix("is_")

    def says(self, *args: str) -> str:
        """The phrase over the given argument names: `says("x")` -> `x is even`."""
        return self.phrase.format(**dict(zip(self.params, args, strict=True)))

    def doc(self) -> str:
        """The one-line docstring of its def."""
        if self.kind == "predicate":
            return f"Return True if {self.says(*self.params)}, False otherwise."
        return f"Return {self.says(*self.params)}."

    def signature(self, name: str = "aux") -> str:
        """The def line and docstring, as the agents see it."""
        args = ", ".join(f"{p}: {self.in_type}" for p in self.params)
        return f'def {name}({args}) -> {self.out_type}:\n    """{self.doc()}"""\n'

    def source(self, name: str = "aux", *, wrong: bool = False) -> str:
        """The full def (the reference, or with `wrong` its buggy variant) under `name`."""
        body = textwrap.indent(textwrap.dedent(self.wrong if wrong else self.body).strip(), "    ")
        return f"{self.signature(name)}{body}\n"
