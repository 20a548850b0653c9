"""MAGRPO math: group advantages, turn returns and the per-agent policy-gradient loss.

Multi-Agent Group-Relative Policy Optimization (arXiv 2508.04652). At every node of the rollout tree the
team samples G joint actions for the same observations. Each joint action's return R is compared with its
G siblings (the group baseline), and every agent is updated with the same advantage on the completion it
contributed to that joint action:

    A^g = R^g - mean_{g'} R^{g'}                                  (paper: group-relative advantage)
    L_i  = - mean_g  A^g * log pi_i(a_i^g | o_i)                   (paper: per-agent policy gradient)
    R_t  = r_t + gamma * mean(children's R_{t+1})                   (paper: multi-turn return)

Options beyond the paper: `rloo` (leave-one-out baseline), `max` (baseline = best sibling), `raw` (no
baseline), `normalize` (divide by the group std with a floor), token-mean log-probs, and a reference-KL
penalty with the k3 estimator (off by default, as in the paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

AdvantageMode = Literal["mean", "rloo", "max", "raw"]


def group_advantages(
    returns: torch.Tensor,
    mode: AdvantageMode,
    normalize: bool,
    std_floor: float,
) -> torch.Tensor:
    """Advantages for returns of shape [groups, G]; each row is one node's G sibling joint actions."""
    if returns.dim() != 2 or returns.shape[1] < 2:
        raise ValueError(f"returns must be [groups, G>=2], got shape {tuple(returns.shape)}")
    g = returns.shape[1]
    if mode == "mean":  # A = R - mean(R of the group)
        adv = returns - returns.mean(dim=1, keepdim=True)
    elif mode == "rloo":  # A = R - mean(R of the other G-1)
        adv = (returns - returns.mean(dim=1, keepdim=True)) * g / (g - 1)
    elif mode == "max":  # A = R - max(R of the group): only the best sibling is not pushed down
        adv = returns - returns.max(dim=1, keepdim=True).values
    elif mode == "raw":
        adv = returns.clone()
    else:
        raise ValueError(f"unknown advantage mode {mode!r}; use mean, rloo, max or raw")
    if normalize:
        std = returns.std(dim=1, unbiased=False, keepdim=True).clamp_min(std_floor)
        adv = adv / std
    return adv


def turn_return(reward: float, child_returns: Sequence[float], gamma: float) -> float:
    """R_t = r_t + gamma * mean(R_{t+1} of the node's children); a leaf returns its reward."""
    if not child_returns:
        return reward
    return reward + gamma * sum(child_returns) / len(child_returns)


LogprobReduction = Literal["sum", "token_mean"]


def reduced_logprobs(
    logprob_sums: torch.Tensor, token_counts: torch.Tensor, reduction: LogprobReduction
) -> torch.Tensor:
    """Each completion's log pi: the sum over its tokens, or (`token_mean`) that sum / its length."""
    if reduction == "sum":
        return logprob_sums
    if reduction == "token_mean":
        return logprob_sums / token_counts.clamp_min(1)
    raise ValueError(f"unknown logprob reduction {reduction!r}; use sum or token_mean")


def policy_loss(
    advantages: torch.Tensor,
    logprob_sums: torch.Tensor,
    token_counts: torch.Tensor,
    reduction: LogprobReduction = "token_mean",
) -> torch.Tensor:
    """-mean(A * log pi(completion)); `token_mean` divides each sequence's log-prob by its length."""
    logp = reduced_logprobs(logprob_sums, token_counts, reduction)
    return -(advantages.detach() * logp).mean()


@dataclass(frozen=True)
class RowLoss:
    """-A * log pi of each row: `policy_loss` before its mean. A value (hashable), so a recorded
    pass (`agents/lora/cuda/graph_update.py`) can be kept per loss."""

    reduction: LogprobReduction

    def __call__(
        self, advantages: torch.Tensor, logprob_sums: torch.Tensor, token_counts: torch.Tensor
    ) -> torch.Tensor:
        logp = reduced_logprobs(logprob_sums, token_counts, self.reduction)
        return -(advantages.detach() * logp)


def kl_k3(policy_logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean of the k3 estimator of KL(pi || ref) over tokens: exp(d) - d - 1, d = ref - pi."""
    d = (ref_logps - policy_logps) * mask
    k3 = (torch.exp(d) - d - 1.0) * mask
    return k3.sum(dim=1) / mask.sum(dim=1).clamp_min(1)


class _Group(Protocol):
    """One agent's G samples at one node (`tree.AgentGroup`)."""

    agent: str
    samples: Sequence[Any]

    def values(self) -> list[float]: ...


@dataclass(frozen=True)
class AdvantageSettings:
    mode: AdvantageMode
    normalize: bool
    std_floor: float


Row = tuple[list[int], list[int], float]
"""(prompt token ids, completion token ids, advantage) of one sample, or of one segment of a
sample that called tools (`joint/tool_turn.py`)."""


def sample_advantages(
    groups: Sequence[_Group], settings: AdvantageSettings
) -> dict[str, list[Row]]:
    """Per agent, every sample with its group-relative advantage (each group is one row of A).

    A sample that called tools is several segments, each generated from a prompt holding the earlier
    segments and the tools' results: log pi(sample) = sum_k log pi(segment_k | prompt_k), so each
    segment is a row with the sample's advantage and the loss never covers a result's tokens.
    (Under the `sum` reduction the gradient is exactly -A * grad log pi(sample), up to the step's
    mean over rows; under `token_mean` each segment is averaged over its own tokens.)"""
    rows: dict[str, list[Row]] = {}
    for group in groups:
        adv = group_advantages(
            torch.tensor([group.values()]), settings.mode, settings.normalize, settings.std_floor
        )[0]
        for sample, a in zip(group.samples, adv.tolist(), strict=True):
            mine = rows.setdefault(group.agent, [])
            mine.append((sample.prompt_ids, sample.token_ids, a))
            mine.extend((prompt, tokens, a) for prompt, tokens in sample.continuations)
    return rows
