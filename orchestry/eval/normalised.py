"""The MAGRPO paper's normalised columns (arXiv 2508.04652, Table 2), from a method's rows.

    Return %   mean total reward / the maximum total reward (4.0 at the default weights)
    Tests %    mean fraction of asserts passed (our test_pass_rate)
    Coop %     mean cooperation part of the reward / its maximum (coop_call + coop_nontrivial,
               1.5 at the default weights); the ignored-value penalty counts, so it can go below 0

Each is a mean over problems of the per-problem mean (as `metrics.py` averages the return), in
percent. The maxima come from the level reward's weights (params `reward`, `envs/code/reward.py`
`RewardWeights`): every level at its top, one helper called and used non-trivially, no penalty.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestry.eval.metrics import problem_rates
from orchestry.eval.paired import by_problem

PAPER_COLUMNS = ("return_pct", "tests_pct", "coop_pct")
PAPER_LABELS = {"return_pct": "Return %", "tests_pct": "Tests %", "coop_pct": "Coop %"}
DEFINITION = (
    "Return %, Tests % and Coop % are the MAGRPO paper's normalised columns (arXiv 2508.04652, "
    "Table 2): the mean total reward over its maximum ({max_return:.1f} with these weights), the "
    "mean fraction of asserts passed, and the mean cooperation part of the reward over its maximum "
    "(coop_call + coop_nontrivial = {max_coop:.1f}; the ignored-value penalty counts), each a mean "
    "over problems of the per-problem mean, in percent."
)


def max_cooperation(weights: Mapping[str, float]) -> float:
    """The cooperation part's top: main calls every helper and uses it non-trivially."""
    return weights["coop_call"] + weights["coop_nontrivial"]


def max_return(weights: Mapping[str, float]) -> float:
    """The level reward's top: every level at its weight, the cooperation part at its top."""
    levels = ("aux_defined", "main_defined", "syntax", "tests")
    return sum(weights[k] for k in levels) + max_cooperation(weights)


def paper_columns(
    rows: Sequence[Mapping[str, Any]], weights: Mapping[str, float]
) -> dict[str, float]:
    """`PAPER_COLUMNS` of one method's code rows (their reward: total, pass_rate, cooperation)."""
    grouped = by_problem(rows)
    if not grouped:
        raise ValueError("no rows to compute the paper's columns from")

    def mean(key: str) -> float:
        return float(np.mean(problem_rates(grouped, lambda r: float(r["reward"][key]))))

    return {
        "return_pct": 100.0 * mean("total") / max_return(weights),
        "tests_pct": 100.0 * mean("pass_rate"),
        "coop_pct": 100.0 * mean("cooperation") / max_cooperation(weights),
    }
