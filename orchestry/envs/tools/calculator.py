"""Safe arithmetic: an expression's `ast` is walked, and only numbers and arithmetic operators are
evaluated (no names, calls, attributes or subscripts), so no code of the agent ever runs."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[float], float]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
MAX_EXPONENT = 1000
"""A power's exponent is capped (abs), so `9**9**9` is refused instead of filling the memory."""
MAX_BITS = 4096
"""An integer result wider than this is refused (chained powers grow without bound)."""
MAX_CHARS = 500
"""Longer expressions are refused."""


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or cannot be computed."""


def calculate(expression: str) -> int | float:
    """The value of an arithmetic expression of numbers, + - * / // % ** and parentheses."""
    text = expression.strip()
    if len(text) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an expression: {exc.msg}") from None
    return _value(tree.body)


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        try:
            result = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError) as exc:
            raise CalculatorError(str(exc)) from None
        if isinstance(result, int) and result.bit_length() > MAX_BITS:
            raise CalculatorError(f"the result has more than {MAX_BITS} bits")
        if isinstance(result, complex) or (isinstance(result, float) and not math.isfinite(result)):
            raise CalculatorError("the result is not a finite real number")
        return result
    raise CalculatorError(
        f"only numbers and + - * / // % ** are allowed, not {type(node).__name__}"
    )
