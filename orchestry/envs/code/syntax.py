"""Model-written programs parsed without Python's warnings about their text.

`ast.parse` warns (SyntaxWarning: invalid escape sequence, "is" with a literal, ...) for code that
still parses; on model output that is noise, dozens of lines a training run, that buries the progress
bar. Every parse of a model's program goes through here; trusted code (problems, tests) is parsed as
usual so its warnings stay visible to whoever writes it.
"""

from __future__ import annotations

import ast
import warnings


def parse_program(code: str) -> ast.Module:
    """`ast.parse(code)` with its warnings silenced; SyntaxError and ValueError pass through."""
    with warnings.catch_warnings():
        # SyntaxWarning since Python 3.12; DeprecationWarning before (invalid escape sequences)
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(code)
