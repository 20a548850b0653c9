"""The warm start's pre-registered gate (issue #57; docs/findings.md, "Pre-registration: the warm
start"): whether a team-vs-single comparison after the warm start can be read at all.

On the compositional held-out set, 8 samples a problem, after the warm start and before any RL:
GO when the single agent's pass@1 lies in [`PASS_LOW`, `PASS_HIGH`] (a floor would measure nothing
but the trivial asserts, a ceiling leaves nothing to gain) and the team's main agent joined with
the reference `aux` is correct more often than that by at least `HEADROOM` (what a perfect helper
could add, the most cooperation can pay). The thresholds are the registration's: never changed
after a run was seen.
"""

from __future__ import annotations

from typing import Any

PASS_LOW, PASS_HIGH = 0.05, 0.90
HEADROOM = 0.03


def warm_start_gate(single_pass_at_1: float, main_with_reference_aux: float) -> dict[str, Any]:
    """The two gate numbers, each test and the verdict (`GO` or `NO-GO`), as gate.json holds them."""
    for name, value in (
        ("single_pass_at_1", single_pass_at_1),
        ("main_with_reference_aux", main_with_reference_aux),
    ):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a rate in [0, 1], got {value}")
    in_range = PASS_LOW <= single_pass_at_1 <= PASS_HIGH
    headroom = round(main_with_reference_aux - single_pass_at_1, 9)  # 0.72 - 0.69 is 0.03
    go = in_range and headroom >= HEADROOM
    return {
        "single_pass_at_1": single_pass_at_1,
        "main_with_reference_aux": main_with_reference_aux,
        "single_in_range": in_range,
        "range": [PASS_LOW, PASS_HIGH],
        "headroom": headroom,
        "min_headroom": HEADROOM,
        "verdict": "GO" if go else "NO-GO",
    }
