"""The helper primitives over integers: predicates, transforms, keys and combiners.

Every body is total on all integers (no exception, no loop that can run long on the small inputs the
generator makes). Each wrong body is a bug a programmer could write: a boundary (`>=` for `>`), a sign
(`n % 10` on negatives), a rounding rule; tests that never touch that case let it pass.
"""

from __future__ import annotations

from orchestry.envs.code.generated.primitive import Primitive

_PRIME = """
if n < {low}:
    return False
d = 2
while d * d <= n:
    if n % d == 0:
        return False
    d += 1
return True
"""

_SQUARE = """
if n {cmp} 0:
    return False
r = 0
while r * r < n:
    r += 1
return r * r == n
"""

_GCD = """
{start}while b:
    a, b = b, a % b
return a
"""

NUMBER_PREDICATES: tuple[Primitive, ...] = tuple(
    Primitive(name, "predicate", "int", "bool", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        ("is_even", "{n} is even", "return n % 2 == 0", "return n % 2 == 0 and n != 0", ""),
        ("is_odd", "{n} is odd", "return n % 2 == 1", "return n % 2 == 1 and n > 0", ""),
        ("is_positive", "{n} is greater than 0", "return n > 0", "return n >= 0", ""),
        ("is_negative", "{n} is less than 0", "return n < 0", "return n <= 0", ""),
        ("is_prime", "{n} is a prime number", _PRIME.format(low=2), _PRIME.format(low=1), ""),
        (
            "is_square",
            "{n} is a perfect square (0, 1, 4, 9, ...)",
            _SQUARE.format(cmp="<"),
            _SQUARE.format(cmp="<="),
            "",
        ),
        (
            "is_multiple_of_three",
            "{n} is divisible by 3",
            "return n % 3 == 0",
            'return str(n)[-1] in "0369"',
            "multiple_of_three",
        ),
        (
            "is_single_digit",
            "{n} has one decimal digit (from -9 to 9)",
            "return -9 <= n <= 9",
            "return 0 <= n <= 9",
            "",
        ),
        (
            "is_digit_palindrome",
            "the decimal digits of {n}, sign ignored, read the same backwards",
            "digits = str(abs(n))\nreturn digits == digits[::-1]",
            "return str(n) == str(n)[::-1]",
            "palindrome",
        ),
        (
            "has_digit_seven",
            "{n} has the digit 7 (sign ignored)",
            'return "7" in str(abs(n))',
            "return n % 10 == 7",
            "with_seven",
        ),
        (
            "is_power_of_two",
            "{n} is a power of two (1, 2, 4, 8, ...)",
            "return n > 0 and n & (n - 1) == 0",
            "return n & (n - 1) == 0",
            "power_of_two",
        ),
        (
            "is_teen",
            "{n} is between 13 and 19 inclusive",
            "return 13 <= n <= 19",
            "return 13 <= n < 19",
            "",
        ),
    )
)

NUMBER_TRANSFORMS: tuple[Primitive, ...] = tuple(
    Primitive(name, "transform", "int", "int", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        ("square", "the square of {n}", "return n * n", "return n * abs(n)", ""),
        ("negate", "{n} with its sign flipped", "return -n", "return -abs(n)", ""),
        ("double", "twice {n}", "return 2 * n", "return n + 2", ""),
        ("increment", "{n} plus one", "return n + 1", "return n + 1 if n >= 0 else n - 1", ""),
        (
            "halve",
            "{n} divided by 2, rounded down (floor division)",
            "return n // 2",
            "return int(n / 2)",
            "",
        ),
        (
            "reverse_digits",
            "{n} with its decimal digits reversed, keeping its sign (-120 gives -21)",
            "digits = int(str(abs(n))[::-1])\nreturn -digits if n < 0 else digits",
            "return int(str(abs(n))[::-1])",
            "",
        ),
        ("cube", "{n} to the power of 3", "return n * n * n", "return abs(n) ** 3", ""),
        (
            "clamp",
            "{n} limited to the range 0 to 10 (below 0 gives 0, above 10 gives 10)",
            "return min(max(n, 0), 10)",
            "return min(n, 10)",
            "",
        ),
        (
            "collatz_step",
            "{n} // 2 when {n} is even, else 3 * {n} + 1",
            "return n // 2 if n % 2 == 0 else 3 * n + 1",
            "return n // 2 if n % 2 == 0 else 3 * n",
            "collatz",
        ),
        (
            "round_to_ten",
            "{n} rounded to the nearest multiple of 10, halves rounded up (15 gives 20, -15 gives -10)",
            "return (n + 5) // 10 * 10",
            "return round(n, -1)",
            "rounded",
        ),
        (
            "triangle",
            "the sum 1 + 2 + ... + {n} (0 when {n} is less than 1)",
            "return n * (n + 1) // 2 if n > 0 else 0",
            "return n * (n + 1) // 2",
            "",
        ),
    )
)

NUMBER_KEYS: tuple[Primitive, ...] = tuple(
    Primitive(name, "key", "int", "int", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        (
            "absolute",
            "the absolute value of {n}",
            "return abs(n)",
            "return n if n >= -1 else -n",
            "",
        ),
        (
            "last_digit",
            "the last decimal digit of {n}, sign ignored (-47 gives 7)",
            "return abs(n) % 10",
            "return n % 10",
            "",
        ),
        (
            "digit_sum",
            "the sum of the decimal digits of {n}, sign ignored",
            "return sum(int(d) for d in str(abs(n)))",
            "return abs(n) % 9",
            "",
        ),
        (
            "digit_count",
            "the number of decimal digits of {n}, sign ignored",
            "return len(str(abs(n)))",
            "return len(str(n))",
            "",
        ),
        (
            "distance_to_ten",
            "how far {n} is from 10 (the absolute difference)",
            "return abs(n - 10)",
            "return 10 - n",
            "",
        ),
        (
            "sign",
            "the sign of {n}: -1, 0 or 1",
            "return (n > 0) - (n < 0)",
            "return 1 if n > 0 else -1",
            "",
        ),
        (
            "tens_digit",
            "the tens digit of {n}, sign ignored (0 for one-digit numbers; -47 gives 4)",
            "return abs(n) // 10 % 10",
            "return n // 10 % 10",
            "",
        ),
        (
            "remainder_five",
            "the remainder of {n} divided by 5, from 0 to 4 (also for negative {n}: -1 gives 4)",
            "return n % 5",
            "return abs(n) % 5",
            "",
        ),
        (
            "bit_count",
            "the number of 1s among the binary digits of {n}, sign ignored (6 = 110 gives 2)",
            'return bin(abs(n)).count("1")',
            "return len(bin(abs(n))) - 2",
            "ones",
        ),
    )
)

NUMBER_COMBINERS: tuple[Primitive, ...] = tuple(
    Primitive(name, "combiner", "int", "int", phrase, body, wrong, short)
    for name, phrase, body, wrong, short in (
        ("add", "the sum of {a} and {b}", "return a + b", "return a - b", ""),
        (
            "maximum",
            "the larger of {a} and {b}",
            "return a if a >= b else b",
            "return a if abs(a) >= abs(b) else b",
            "",
        ),
        (
            "minimum",
            "the smaller of {a} and {b}",
            "return a if a <= b else b",
            "return a if abs(a) <= abs(b) else b",
            "",
        ),
        (
            "multiply",
            "the product of {a} and {b}",
            "return a * b",
            "return a * b if a and b else a + b",
            "",
        ),
        (
            "abs_difference",
            "the absolute difference of {a} and {b}",
            "return abs(a - b)",
            "return a - b",
            "",
        ),
        (
            "gcd",
            "the greatest common divisor of {a} and {b} (never negative; 0 when both are 0)",
            _GCD.format(start="a, b = abs(a), abs(b)\n"),
            _GCD.format(start=""),
            "",
        ),
    )
)

NUMBER_PRIMITIVES: tuple[Primitive, ...] = (
    *NUMBER_PREDICATES,
    *NUMBER_TRANSFORMS,
    *NUMBER_KEYS,
    *NUMBER_COMBINERS,
)
