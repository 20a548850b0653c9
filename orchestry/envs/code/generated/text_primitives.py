"""The helper primitives over strings (words, or single characters): predicates, transforms, keys
and combiners.

Every body is total on all strings, the empty one and non-ASCII letters included ("été", "ÅSA").
Each wrong body is a plausible bug: case (`"aeiou"` without the capitals), the empty string, a
tie-break, a missing wrap-around.
"""

from __future__ import annotations

from orchestry.envs.code.generated.primitive import Primitive

_SHIFT = """
out = ""
for c in s:
    if "a" <= c <= "z":
        c = {shifted}
    out += c
return out
"""

_INTERLEAVE = """
out = ""
for i in range(max(len(a), len(b))):
    out += a[i : i + 1] + b[i : i + 1]
return out
"""

TEXT_PREDICATES: tuple[Primitive, ...] = tuple(
    Primitive(name, "predicate", "str", "bool", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        (
            "starts_with_vowel",
            "{s} starts with a vowel (a, e, i, o or u, either case)",
            'return s[:1].lower() in ("a", "e", "i", "o", "u")',
            'return s[:1] in "aeiou"',
            "",
        ),
        (
            "is_palindrome",
            "{s} reads the same backwards, ignoring case",
            "return s.lower() == s.lower()[::-1]",
            "return s == s[::-1]",
            "",
        ),
        (
            "is_capitalised",
            "{s} starts with an uppercase letter",
            "return s[:1].isupper()",
            "return s.isupper()",
            "",
        ),
        (
            "is_long",
            "{s} has more than 4 characters",
            "return len(s) > 4",
            "return len(s) >= 4",
            "",
        ),
        (
            "has_digit",
            "{s} contains a digit from 0 to 9",
            'return any(c in "0123456789" for c in s)',
            "return s[-1:].isdigit()",
            "with_digit",
        ),
        (
            "is_alphabetic",
            "{s} is not empty and made of letters only",
            "return s.isalpha()",
            "return s.isalnum()",
            "",
        ),
        (
            "ends_with_s",
            "{s} ends with the letter s, either case",
            'return s[-1:].lower() == "s"',
            'return s.endswith("s")',
            "",
        ),
        (
            "has_double_letter",
            "{s} has the same character twice in a row",
            "return any(x == y for x, y in zip(s, s[1:]))",
            "return len(set(s)) < len(s)",
            "with_double",
        ),
        (
            "has_no_uppercase",
            "{s} contains no uppercase letter",
            "return not any(c.isupper() for c in s)",
            "return s.islower()",
            "without_capitals",
        ),
        (
            "has_vowel",
            "{s} contains a vowel (a, e, i, o or u, either case)",
            'return any(c in "aeiouAEIOU" for c in s)',
            'return any(c in "aeiou" for c in s)',
            "with_vowel",
        ),
        (
            "is_short",
            "{s} has at most 2 characters",
            "return len(s) <= 2",
            "return len(s) < 2",
            "short",
        ),
        (
            "is_shouted",
            "{s} has a letter and no lowercase letter",
            "return s.isupper()",
            "return s == s.upper()",
            "shouted",
        ),
    )
)

TEXT_TRANSFORMS: tuple[Primitive, ...] = tuple(
    Primitive(name, "transform", "str", "str", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        ("reverse", "{s} reversed", "return s[::-1]", "return s[:0:-1]", "reversed"),
        (
            "capitalise",
            "{s} with its first character in uppercase and the others in lowercase",
            "return s[:1].upper() + s[1:].lower()",
            "return s[:1].upper() + s[1:]",
            "capitalised",
        ),
        (
            "upper",
            "{s} in uppercase",
            "return s.upper()",
            "return s.upper() if s.isalpha() else s",
            "uppercased",
        ),
        (
            "strip_vowels",
            "{s} without its vowels (a, e, i, o and u, either case)",
            'return "".join(c for c in s if c.lower() not in "aeiou")',
            'return "".join(c for c in s if c not in "aeiou")',
            "devowelled",
        ),
        (
            "double_chars",
            "{s} with every character written twice ('ab' gives 'aabb')",
            'return "".join(c + c for c in s)',
            "return s + s",
            "doubled",
        ),
        (
            "shift_letters",
            "{s} with each letter from a to z moved one place on in the alphabet (z becomes a), "
            "other characters unchanged",
            _SHIFT.format(shifted='"a" if c == "z" else chr(ord(c) + 1)'),
            _SHIFT.format(shifted="chr(ord(c) + 1)"),
            "shifted",
        ),
        (
            "mirror",
            "{s} followed by {s} reversed ('ab' gives 'abba')",
            "return s + s[::-1]",
            "return s + s",
            "mirrored",
        ),
        (
            "swap_case",
            "{s} with lowercase letters made uppercase and uppercase letters made lowercase",
            "return s.swapcase()",
            "return s.lower()",
            "swapped",
        ),
        (
            "drop_first",
            "{s} without its first character ('' stays '')",
            "return s[1:]",
            "return s[:-1]",
            "trimmed",
        ),
        (
            "lower",
            "{s} in lowercase",
            "return s.lower()",
            "return s[:1].lower() + s[1:]",
            "lowercased",
        ),
        (
            "unique_chars",
            "{s} with each character kept only where it first appears ('banana' gives 'ban')",
            'return "".join(dict.fromkeys(s))',
            'return "".join(sorted(set(s)))',
            "deduplicated",
        ),
        (
            "sort_chars",
            "the characters of {s} in sorted order (as Python's sorted orders them)",
            'return "".join(sorted(s))',
            'return "".join(sorted(s.lower()))',
            "sorted",
        ),
    )
)

TEXT_KEYS: tuple[Primitive, ...] = tuple(
    Primitive(name, "key", "str", out, phrase, body, wrong, short)
    for name, out, phrase, body, wrong, short in (
        (
            "length",
            "int",
            "the number of characters of {s}",
            "return len(s)",
            "return len(set(s))",
            "",
        ),
        (
            "last_char",
            "str",
            "the last character of {s} ('' for an empty string)",
            "return s[-1:]",
            "return s[:1]",
            "",
        ),
        (
            "initial",
            "str",
            "the first character of {s} in lowercase ('' for an empty string)",
            "return s[:1].lower()",
            "return s[:1]",
            "",
        ),
        (
            "vowel_count",
            "int",
            "the number of vowels (a, e, i, o and u, either case) in {s}",
            'return sum(1 for c in s if c.lower() in "aeiou")',
            'return sum(1 for c in s if c in "aeiou")',
            "vowels",
        ),
        (
            "uppercase_count",
            "int",
            "the number of uppercase letters in {s}",
            "return sum(1 for c in s if c.isupper())",
            "return int(s[:1].isupper())",
            "capitals",
        ),
        (
            "distinct_letters",
            "int",
            "the number of different characters in {s}, ignoring case",
            "return len(set(s.lower()))",
            "return len(set(s))",
            "",
        ),
    )
)

TEXT_COMBINERS: tuple[Primitive, ...] = tuple(
    Primitive(name, "combiner", "str", "str", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        ("concat", "{a} followed by {b}", "return a + b", "return b + a", ""),
        (
            "join_dash",
            "{a} and {b} joined by a hyphen ('ab' and 'c' give 'ab-c')",
            'return a + "-" + b',
            'return a + "-" + b if a and b else a + b',
            "",
        ),
        (
            "longer",
            "the longer of {a} and {b} ({a} when both have the same length)",
            "return a if len(a) >= len(b) else b",
            "return a if len(a) > len(b) else b",
            "",
        ),
        (
            "first_alpha",
            "whichever of {a} and {b} comes first alphabetically, ignoring case ({a} on a tie)",
            "return a if a.lower() <= b.lower() else b",
            "return min(a, b)",
            "",
        ),
        (
            "interleave",
            "the characters of {a} and {b} taken in turn, then the rest of the longer one "
            "('abc' and 'xy' give 'axbyc')",
            _INTERLEAVE,
            'return "".join(x + y for x, y in zip(a, b))',
            "",
        ),
    )
)

TEXT_PRIMITIVES: tuple[Primitive, ...] = (
    *TEXT_PREDICATES,
    *TEXT_TRANSFORMS,
    *TEXT_KEYS,
    *TEXT_COMBINERS,
)
