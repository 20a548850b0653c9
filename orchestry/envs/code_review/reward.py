"""The code-review reward: the final code's tests and syntax, and the review judged by the refactor.

Three parts, each in [0, 1], weighted by `CodeReviewSettings`:

    tests    the final code's fraction of the problem's tests passed
    syntax   the final code parses and defines the entry point (a body that does something)
    review   what the refactor made of the draft, credited to the review that steered it:
             - the review is empty                       -> 0
             - the draft passed every test               -> 1 when the final still does, else 0
             - otherwise (fixed - broken) / failing, floored at 0: `failing` the draft's failing
               tests, `fixed` those of them the final passes, `broken` the draft's passing tests
               the final fails (each regression costs what one fix earns, so churn that trades a
               fixed test for a broken one earns nothing)

The final code is the refactorer's when it defines the entry point, else the writer's draft stands
(`final_from`). Everything here is pure: the sandbox's per-test results come in as booleans.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from orchestry.envs.code.live_code import find_function, is_empty_body
from orchestry.envs.code.syntax import parse_program


@dataclass(frozen=True)
class CodeReviewSettings:
    """The code-review reward's weights and the review's length (params: the env's section)."""

    tests_weight: float
    """Weight of the final code's fraction of tests passed."""
    syntax_weight: float
    """Weight of the final code parsing and defining the entry point."""
    review_weight: float
    """Weight of the review's quality, measured by what the refactor fixed (and broke)."""
    review_max_words: int
    """The review is cut to this many words (the reviewer is asked for a short review)."""

    def __post_init__(self) -> None:
        weights = (self.tests_weight, self.syntax_weight, self.review_weight)
        if not all(math.isfinite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(
                f"code_review weights (tests, syntax, review) must be >= 0 with a positive sum: "
                f"{weights}"
            )
        if not (isinstance(self.review_max_words, int) and self.review_max_words >= 1):
            raise ValueError(
                f"code_review review_max_words must be a positive integer, got "
                f"{self.review_max_words!r}"
            )

    @property
    def max_total(self) -> float:
        return self.tests_weight + self.syntax_weight + self.review_weight


def defines_entry_point(code: str, name: str) -> bool:
    """`code` parses and binds a function `name` whose body does something (not a stub)."""
    try:
        tree = parse_program(code)
    except (SyntaxError, ValueError):
        return False
    function = find_function(tree, name)
    return function is not None and not is_empty_body(function.body)


def review_quality(draft: Sequence[bool], final: Sequence[bool], review: str) -> float:
    """The review's part from the draft's and the final's per-test results (module docstring)."""
    if len(draft) != len(final):
        raise ValueError(f"draft has {len(draft)} test results but the final has {len(final)}")
    if not review.strip():
        return 0.0
    failing = [i for i, ok in enumerate(draft) if not ok]
    if not failing:
        return 1.0 if all(final) else 0.0
    fixed = sum(final[i] for i in failing)
    broken = sum(ok and not now for ok, now in zip(draft, final, strict=True))
    return max(0.0, (fixed - broken) / len(failing))


@dataclass(frozen=True)
class ReviewReward:
    """One joint action's reward and the counts behind it."""

    total: float
    tests: float
    syntax: float
    review: float
    draft_pass_rate: float
    final_pass_rate: float
    fixed: int
    """The draft's failing tests that the final passes."""
    broken: int
    """The draft's passing tests that the final fails."""
    still_failing: int
    """The draft's failing tests that the final fails too."""

    @property
    def improved(self) -> bool:
        return self.final_pass_rate > self.draft_pass_rate

    def parts(self) -> dict[str, float]:
        """The reward record: total and each part (the metrics' and the rows' `reward`)."""
        return {
            "total": self.total,
            "tests": self.tests,
            "syntax": self.syntax,
            "review": self.review,
        }

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def review_reward(
    draft: Sequence[bool],
    final: Sequence[bool],
    final_defined: bool,
    review: str,
    settings: CodeReviewSettings,
) -> ReviewReward:
    """The reward of one joint action from the per-test results of its draft and final code
    (tests not run count as failed) and whether the final defines the entry point."""
    if not final:
        raise ValueError("a code problem has at least one test")
    tests = sum(final) / len(final)
    syntax = float(final_defined)
    review_part = review_quality(draft, final, review)
    total = (
        settings.tests_weight * tests
        + settings.syntax_weight * syntax
        + settings.review_weight * review_part
    )
    return ReviewReward(
        total=total,
        tests=tests,
        syntax=syntax,
        review=review_part,
        draft_pass_rate=sum(draft) / len(draft),
        final_pass_rate=tests,
        fixed=sum(now and not ok for ok, now in zip(draft, final, strict=True)),
        broken=sum(ok and not now for ok, now in zip(draft, final, strict=True)),
        still_failing=sum(not ok and not now for ok, now in zip(draft, final, strict=True)),
    )
