"""The inputs a generated main function takes: one `Shape` per kind of argument, each a seeded random
maker and the edge cases worth a test (empty, one element, negatives, ties, non-ASCII letters).

Values are plain Python literals (ints, strings, lists of them), so every test is an exact
`assert candidate(<repr>) == <repr>`. Random values lean towards the boundaries the primitives care
about (0, -1, 9, 10, 19, words starting with a capital or ending in s), so a test that tells a
helper's wrong variant from the right one is usually among the candidates.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

# Boundaries of the number primitives (signs, one digit, teens, powers, squares, rounding halves).
SPECIAL_NUMBERS = (0, 1, -1, 2, -2, 7, 9, -9, 10, 13, 15, -15, 16, 19, 25, 64, 77, 100, 121, -120)
WORDS = (
    "apple", "Echo", "level", "Racecar", "sky", "zebra", "Île", "été", "noon", "a", "Bob",
    "x9", "42", "Hello", "tree", "ÅSA", "mañana", "Otto", "banana", "kayak", "rhythm", "Umbrella",
    "idea", "b2b", "jazz", "glass", "Moss", "book", "cats", "ÉCOLE", "naïve", "Zoo", "oak", "fizz",
    "I", "up", "STOP", "wow", "Anna", "sees", "Quiz", "r2d2", "bus", "ox", "BOSS", "Atlas",
    "ÎLES", "x",
)  # fmt: skip
NAMES = ("a", "b", "x", "y", "id", "age", "Size", "n1", "é")
FILLER = ("I", "have", "cats", "and", "dogs", "on", "day", "or", "km", "items", "left")


@dataclass(frozen=True)
class Shape:
    """One argument of a main function: its annotation, a seeded maker and its edge cases."""

    annotation: str
    make: Callable[[random.Random], object]
    edges: tuple[object, ...] = ()


def _number(rng: random.Random) -> int:
    if rng.random() < 0.35:
        return rng.choice(SPECIAL_NUMBERS)
    return rng.randint(-20, 40)


def _numbers(rng: random.Random) -> list[int]:
    return [_number(rng) for _ in range(rng.randint(2, 7))]


def _words(rng: random.Random) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]


def _sentence(rng: random.Random) -> str:
    return " ".join(_words(rng))


def _text(rng: random.Random) -> str:
    """Characters for the per-character family: words, digits and punctuation."""
    parts = [rng.choice((*WORDS, "!", ",", "?", "7", "-")) for _ in range(rng.randint(2, 5))]
    return " ".join(parts)


def _pairs(rng: random.Random) -> str:
    names = rng.sample(NAMES, rng.randint(1, 4))
    sep = rng.choice((",", ", "))
    return sep.join(f"{name}={_number(rng)}" for name in names)


def _number_text(rng: random.Random) -> str:
    tokens = [
        str(_number(rng)) if rng.random() < 0.45 else rng.choice(FILLER)
        for _ in range(rng.randint(3, 8))
    ]
    return " ".join(tokens)


NUMBER_LIST = Shape(
    "list[int]",
    _numbers,
    ([], [0], [-3], [5, 5], [-1, 0, 1], [19, 13, -9, 100], [-4, -4, 2]),
)
WORD_LIST = Shape(
    "list[str]",
    _words,
    ([], [""], ["Echo"], ["sky", "sky"], ["été", "ÅSA", "naïve"], ["Anna", "", "bus", "Zoo"]),
)
LISTS = {"int": NUMBER_LIST, "str": WORD_LIST}
"""A list of elements, by element type."""

SENTENCE = Shape(
    "str", _sentence, ("", "word", "  two   spaces ", "Île été ÅSA", "jazz Moss sees 42")
)
"""Words separated by spaces (the per-word family)."""
CHAR_TEXT = Shape("str", _text, ("", "a", "Hello, World 42!", "ÉcoLe naïve", "zz Top"))
"""Any characters (the per-character family)."""
PAIRS = Shape("str", _pairs, ("", "x=1", "a=1, b=-2", "a=1,a=3", "id=0, Size=19, é=-15"))
"""`name=value` pairs separated by commas."""
NUMBER_TEXT = Shape(
    "str", _number_text, ("", "no numbers here", "x-5y", "10-3 and 7", "I have 13 cats, 0 dogs")
)
"""Text with whole numbers in it."""
WINDOW = Shape("int", lambda rng: rng.randint(1, 4), (0, 1, 9))
"""The length of a sliding window."""
LIMIT = Shape("int", lambda rng: rng.randint(0, 9), (-1, 0))
"""A threshold to compare a key with."""
