"""The figures stage's pure pieces: quarter returns per training run."""

from __future__ import annotations

import pandas as pd
import pytest

from orchestry.figures import quarter_returns


def test_quarter_returns_compare_first_and_last_quarter() -> None:
    history = pd.DataFrame({"return_mean": [0.2, 0.4, 0.1, 0.5, 0.9, 1.0, 0.8, 1.2]})
    assert quarter_returns(history) == pytest.approx((0.3, 1.0))


def test_quarter_returns_of_a_short_run_use_one_step_each() -> None:
    assert quarter_returns(pd.DataFrame({"return_mean": [0.5, 0.7, 0.6]})) == (0.5, 0.6)
