"""A family of compositions: the main function's job around one or two primitives.

A `Family` takes primitives (the first is the helper's `aux`; a second, in the harder families, is a
step main carries out itself) and composes a main function: its name, parameters, what it returns
in plain English, and its body. `render_main` turns that into the signature the agents see (the def
line and a docstring ending in a worked example) and the reference implementation; a second
primitive becomes a function nested in main, under its own name, so main's reference is one def.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from orchestry.envs.code.generated.inputs import Shape
from orchestry.envs.code.generated.primitive import Primitive

DOC_WIDTH = 92


@dataclass(frozen=True)
class Param:
    """One parameter of main: its name and the shape of its values."""

    name: str
    shape: Shape


@dataclass(frozen=True)
class Composition:
    """What a family makes of its primitives (everything but the tests)."""

    name: str
    """Main's name."""
    params: tuple[Param, ...]
    returns: str
    """Main's return annotation."""
    does: str
    """What main returns, in plain English, starting with "Return"; it names aux where aux is used."""
    task: str
    """The problem in one sentence (the prompt's first line)."""
    body: str
    """Main's body: Python statements over its parameters, `aux` and the step's name."""

    def __post_init__(self) -> None:
        if not self.does.startswith("Return"):
            raise ValueError(f"composition {self.name}: `does` must start with 'Return'")


@dataclass(frozen=True)
class Family:
    """A way for main to use its helper: which primitives it takes and how it composes them."""

    name: str
    depth: int
    """How much main does besides calling aux: 0 one plain pass; 1 a pass with a special case
    (empty input, none found, ties) or an order; 2 a structure built, parsed or windowed."""
    slots: tuple[tuple[str, ...], ...]
    """The primitive kinds it takes, in order: aux's, then (two-primitive families) main's step's."""
    compose: Callable[..., Composition]
    """The composition of its primitives (one argument per slot)."""
    accepts: Callable[..., bool] = lambda *primitives: True
    """Whether the primitives fit together (types beyond the kinds)."""

    def takes(self, primitives: tuple[Primitive, ...]) -> bool:
        """Whether this family composes these primitives (distinct ones), one per slot."""
        return (
            len(primitives) == len(self.slots)
            and len({p.name for p in primitives}) == len(primitives)
            and all(p.kind in kinds for p, kinds in zip(primitives, self.slots, strict=True))
            and self.accepts(*primitives)
        )


def _docstring(does: str, example: str) -> str:
    lines = textwrap.wrap(does, DOC_WIDTH)
    body = "\n    ".join(lines)
    return f'    """{body}\n\n    Example: {example}\n    """\n'


def render_main(
    comp: Composition,
    example: str | None,
    step: Primitive | None = None,
    *,
    wrong_step: bool = False,
) -> tuple[str, str]:
    """(signature, reference) of main: the def line with its docstring, and the full def.

    `example` None leaves the docstring out (the generator's working copy, before the example is
    known). `step` (main's own primitive) is nested in main under its own name; `wrong_step` nests
    its wrong variant instead (for the check that the tests need the step right)."""
    args = ", ".join(f"{p.name}: {p.shape.annotation}" for p in comp.params)
    doc = "" if example is None else _docstring(comp.does, example)
    signature = f"def {comp.name}({args}) -> {comp.returns}:\n{doc}"
    nested = ""
    if step is not None:
        nested = textwrap.indent(step.source(step.name, wrong=wrong_step), "    ") + "\n"
    body = textwrap.indent(textwrap.dedent(comp.body).strip(), "    ")
    return signature, f"{signature}{nested}{body}\n"


def describe_helper(aux: Primitive) -> str:
    """The prompt's line about the helper: `The helper aux(n) returns True if n is even, ...`."""
    doc = aux.doc().removeprefix("Return ")
    return f"The helper `aux({', '.join(aux.params)})` returns {doc}"


def describe_main(comp: Composition) -> str:
    """The prompt's line about main: `The main function count_even(nums) returns how many ...`."""
    names = ", ".join(p.name for p in comp.params)
    return f"The main function `{comp.name}({names})` returns{comp.does.removeprefix('Return')}"
