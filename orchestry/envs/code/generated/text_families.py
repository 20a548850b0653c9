"""The one-primitive families over text: main splits or parses a string and calls aux on the parts.

per word (a transform on each word), per character (drop the characters a predicate holds for),
`name=value` pairs parsed into a dict (a transform on each value), numbers found in text (a
predicate on each number).
"""

from __future__ import annotations

from orchestry.envs.code.generated.family import Composition, Family, Param
from orchestry.envs.code.generated.inputs import CHAR_TEXT, NUMBER_TEXT, PAIRS, SENTENCE
from orchestry.envs.code.generated.list_families import PREDICATE, TRANSFORM, VALUE
from orchestry.envs.code.generated.primitive import Primitive


def _per_word(p: Primitive) -> Composition:
    return Composition(
        name=f"{p.word}_words",
        params=(Param("text", SENTENCE),),
        returns="str",
        does="Return the words of text (its runs of non-space characters) each replaced by "
        "aux(word), joined by single spaces.",
        task=f"Replace every word w of a text by {p.says('w')}.",
        body='return " ".join(aux(word) for word in text.split())',
    )


def _per_char(p: Primitive) -> Composition:
    return Composition(
        name=f"drop_chars_{p.word}",
        params=(Param("text", CHAR_TEXT),),
        returns="str",
        does="Return text without the characters c for which aux(c) is True (aux is called on one "
        "character at a time); the other characters stay in order.",
        task=f"Remove from a text every character c for which {p.says('c')}.",
        body='return "".join(c for c in text if not aux(c))',
    )


def _parse_pairs(p: Primitive) -> Composition:
    return Composition(
        name=f"parse_{p.word}",
        params=(Param("text", PAIRS),),
        returns=f"dict[str, {p.out_type}]",
        does="Return a dict mapping each name of text to aux(value) of its integer value. text "
        "holds pairs name=value separated by commas (spaces around names and values are "
        "ignored); a later pair replaces an earlier one with the same name; an empty text "
        "gives {}.",
        task=f"Parse a text of name=value pairs and map each name to {p.says('value')}.",
        body="""
        result = {}
        for part in text.split(","):
            if part.strip():
                name, value = part.split("=")
                result[name.strip()] = aux(int(value))
        return result
        """,
    )


def _numbers_in_text(p: Primitive) -> Composition:
    return Composition(
        name=f"{p.word}_numbers_in",
        params=(Param("text", NUMBER_TEXT),),
        returns="list[int]",
        does="Return the whole numbers written in text (runs of the digits 0-9, negative when a "
        "'-' comes right before the digits), in order, keeping those n for which aux(n) is "
        "True.",
        task=f"Find the whole numbers n written in a text for which {p.says('n')}.",
        body="""
        numbers = []
        digits = ""
        for i, c in enumerate(text + " "):
            if c in "0123456789":
                if not digits and i > 0 and text[i - 1] == "-":
                    digits = "-"
                digits += c
            elif digits:
                numbers.append(int(digits))
                digits = ""
        return [n for n in numbers if aux(n)]
        """,
    )


def _is_text(p: Primitive) -> bool:
    return p.in_type == "str"


def _is_number(p: Primitive) -> bool:
    return p.in_type == "int"


TEXT_FAMILIES: tuple[Family, ...] = (
    Family("per_word", 1, (TRANSFORM,), _per_word, _is_text),
    Family("per_char", 1, (PREDICATE,), _per_char, _is_text),
    Family("parse_pairs", 2, (VALUE,), _parse_pairs, _is_number),
    Family("numbers_in_text", 2, (PREDICATE,), _numbers_in_text, _is_number),
)
