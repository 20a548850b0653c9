"""MAGRPO formulas checked on hand-made numbers."""

import math

import pytest
import torch

from orchestry.algos.magrpo import group_advantages, kl_k3, policy_loss, turn_return


def test_mean_advantage_subtracts_group_mean():
    r = torch.tensor([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 0.0, 4.0]])
    # group means 3.0 and 1.0
    expected = torch.tensor([[-2.0, -1.0, 0.0, 3.0], [-1.0, -1.0, -1.0, 3.0]])
    assert torch.allclose(group_advantages(r, "mean", False, 0.01), expected)


def test_rloo_uses_mean_of_the_others():
    r = torch.tensor([[1.0, 2.0, 3.0, 6.0]])
    # sample 0: 1 - (2+3+6)/3 = 1 - 11/3 = -8/3
    expected = torch.tensor([[1 - 11 / 3, 2 - 10 / 3, 3 - 9 / 3, 6 - 6 / 3]])
    assert torch.allclose(group_advantages(r, "rloo", False, 0.01), expected)


def test_max_and_raw_modes():
    r = torch.tensor([[1.0, 4.0, 2.0]])
    assert torch.allclose(
        group_advantages(r, "max", False, 0.01), torch.tensor([[-3.0, 0.0, -2.0]])
    )
    assert torch.allclose(group_advantages(r, "raw", False, 0.01), r)


def test_normalize_divides_by_population_std_with_floor():
    r = torch.tensor([[1.0, 3.0], [2.0, 2.0]])
    adv = group_advantages(r, "mean", normalize=True, std_floor=0.5)
    # group 0: mean 2, std 1 -> [-1, 1]; group 1: all equal -> 0 / floor = 0
    assert torch.allclose(adv, torch.tensor([[-1.0, 1.0], [0.0, 0.0]]))
    tiny = group_advantages(torch.tensor([[1.0, 1.1]]), "mean", normalize=True, std_floor=0.5)
    assert torch.allclose(tiny, torch.tensor([[-0.1, 0.1]]))  # std 0.05 < floor 0.5


def test_group_advantages_rejects_bad_shapes_and_modes():
    with pytest.raises(ValueError, match="G>=2"):
        group_advantages(torch.tensor([[1.0]]), "mean", False, 0.01)
    with pytest.raises(ValueError, match="unknown advantage mode"):
        group_advantages(torch.tensor([[1.0, 2.0]]), "median", False, 0.01)  # type: ignore[arg-type]


def test_turn_return_adds_discounted_mean_of_children():
    assert turn_return(1.0, [], 0.9) == 1.0
    assert math.isclose(turn_return(1.0, [2.0, 4.0], 0.5), 1.0 + 0.5 * 3.0)


def test_policy_loss_sum_and_token_mean():
    adv = torch.tensor([1.0, -2.0])
    logp = torch.tensor([-4.0, -6.0], requires_grad=True)
    counts = torch.tensor([2.0, 3.0])
    # sum: -mean(1*-4, -2*-6) = -mean(-4, 12) = -4
    assert math.isclose(policy_loss(adv, logp, counts, "sum").item(), -4.0)
    # token_mean: logp/len = [-2, -2] -> -mean(-2, 4) = -1
    loss = policy_loss(adv, logp, counts, "token_mean")
    assert math.isclose(loss.item(), -1.0)
    loss.backward()
    # d/dlogp of -mean(A * logp / n) = -A / (n * B)
    assert torch.allclose(logp.grad, torch.tensor([-1.0 / 4, 2.0 / 6]))


def test_policy_loss_does_not_backprop_into_advantages():
    adv = torch.tensor([1.0], requires_grad=True)
    policy_loss(
        adv, torch.tensor([-1.0], requires_grad=True), torch.tensor([1.0]), "sum"
    ).backward()
    assert adv.grad is None


def test_kl_k3_matches_formula_and_is_zero_when_equal():
    pol = torch.tensor([[-1.0, -2.0, -3.0]])
    ref = torch.tensor([[-1.5, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    d = torch.tensor([-0.5, 0.0])
    expected = ((torch.exp(d) - d - 1).sum() / 2).item()
    assert math.isclose(kl_k3(pol, ref, mask).item(), expected, rel_tol=1e-6)
    assert kl_k3(pol, pol, mask).item() == 0.0
