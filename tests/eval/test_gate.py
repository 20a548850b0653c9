"""The warm start's pre-registered gate (issue #57): its thresholds and verdicts."""

import pytest

from orchestry.eval.gate import HEADROOM, PASS_HIGH, PASS_LOW, warm_start_gate


def test_the_registered_thresholds():
    # docs/findings.md, "Pre-registration: the warm start", states these numbers
    assert (PASS_LOW, PASS_HIGH, HEADROOM) == (0.05, 0.90, 0.03)


@pytest.mark.parametrize(
    "single, main_ref, verdict",
    [
        (0.69, 0.82, "GO"),  # the probe's numbers
        (0.69, 0.72, "GO"),  # exactly the headroom
        (0.69, 0.71, "NO-GO"),  # a perfect helper could add too little
        (0.02, 0.50, "NO-GO"),  # a floor: only trivial asserts would be compared
        (0.95, 1.00, "NO-GO"),  # a ceiling: nothing left to gain
        (0.05, 0.08, "GO"),
        (0.90, 0.93, "GO"),
    ],
)
def test_the_verdict(single, main_ref, verdict):
    gate = warm_start_gate(single, main_ref)
    assert gate["verdict"] == verdict
    assert gate["single_pass_at_1"] == single and gate["main_with_reference_aux"] == main_ref


def test_a_number_that_is_no_rate_is_named():
    with pytest.raises(ValueError, match="main_with_reference_aux must be a rate"):
        warm_start_gate(0.5, 1.5)
