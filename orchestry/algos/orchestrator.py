"""A learned orchestrator: a policy that picks which agent acts next, trained with REINFORCE on r - λ·C.

The "Puppeteer" model (arXiv 2505.19591). At decision t the state s_t is an embedding of the task and the
transcript so far (e.g. the frozen base model's last hidden state); a small head maps it to logits over the
n agents and `stop` (the last action). Each call's cost c_t (tokens, seconds) is charged at the decision that
made it, the task reward r at the last decision (the `stop`, or the last call when max_steps forced the stop):

    pi(a | s_t)  = softmax(mask_t(head(s_t)))          stop masked at t = 0; only stop once t = max_steps
    r_t          = -λ c_t  (+ r at the last decision)   so with γ = 1:  G_0 = r - λ C,  C = Σ_t c_t
    G_t          = Σ_{k>=t} γ^(k-t) r_k
    L            = -mean_t (G_t - b) log pi(a_t | s_t) - β mean_t H(pi(. | s_t))      (mean over decisions)
    b           <- m b + (1 - m) mean_episodes G_0      (EMA of the episode return; the update uses the old b)

A forced stop (max_steps calls made) is no decision: nothing is sampled or recorded for it, so an episode
has one decision per call, plus one for `stop` when the policy chose it.

Where this departs from Puppeteer (as we read it): the paper also puts an MLP over a pretrained language
model's state, but shapes the cost per step (growing with the step index) and explores several paths per
task; here the cost is whatever `act_fn` reports for the call (pass a shaped cost to get theirs), one path
per episode, and the plain REINFORCE gradient gets an EMA baseline, an entropy bonus and gradient clipping.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from orchestry.algos.pg_update import TrainingFailed


@dataclass(frozen=True)
class OrchestratorSettings:
    lr: float
    """Adam learning rate of the policy head."""
    gamma: float
    """Discount per decision (1.0: every decision sees r - λ·(cost from its call on))."""
    entropy_coef: float
    """β: weight of the mean policy entropy bonus."""
    baseline_momentum: float
    """m: the baseline b <- m·b + (1-m)·mean episode return after each update."""
    grad_clip: float
    """Max global gradient norm of the head per update."""
    cost_weight: float
    """λ: reward per unit of cost spent (r - λ·C)."""
    max_steps: int
    """Most agent calls per episode; after that the episode stops without a decision."""

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"orchestrator max_steps must be >= 1, got {self.max_steps}")
        if not 0.0 <= self.baseline_momentum <= 1.0:
            raise ValueError(f"baseline_momentum must be in [0, 1], got {self.baseline_momentum}")


def action_mask(steps: torch.Tensor, n_agents: int, max_steps: int) -> torch.Tensor:
    """[len(steps), n_agents + 1] bools, True = allowed: no stop at step 0, only stop at max_steps."""
    steps = steps.reshape(-1, 1)
    agents = (steps < max_steps).expand(-1, n_agents)
    stop = steps > 0
    return torch.cat([agents, stop], dim=1)


class OrchestratorPolicy(torch.nn.Module):
    """LayerNorm -> Linear -> tanh -> Linear: logits over n_agents agents and `stop` (the last)."""

    def __init__(self, dim: int, n_agents: int, hidden: int) -> None:
        super().__init__()
        self.n_agents = n_agents
        self.head = torch.nn.Sequential(
            torch.nn.LayerNorm(dim),
            torch.nn.Linear(dim, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, n_agents + 1),
        )
        out = self.head[-1]
        # near-uniform start (CleanRL's actor init): every agent gets tried before any is preferred
        torch.nn.init.orthogonal_(out.weight, gain=0.01)
        torch.nn.init.zeros_(out.bias)

    @property
    def stop(self) -> int:
        return self.n_agents

    def distribution(
        self, states: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.distributions.Categorical:
        """pi(. | s) for states [B, dim]; `mask` [B, n_agents + 1] (True = allowed) zeroes the rest."""
        logits = self.head(states)
        if mask is not None:
            # the dtype's lowest finite value, not -inf: exp underflows to an exact 0, and the
            # entropy and gradients stay finite
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        return torch.distributions.Categorical(logits=logits)


@dataclass(frozen=True)
class Episode:
    """One orchestrated episode: what the update needs, and the transcript for the caller's logs."""

    states: torch.Tensor
    """[decisions, dim] state embeddings, detached."""
    actions: torch.Tensor
    """[decisions] long: an agent index, or n_agents for stop (then the last)."""
    costs: tuple[float, ...]
    """Cost of each call, in call order (one per agent action)."""
    reward: float
    """r: the task's score of the final transcript."""
    transcript: tuple[Any, ...]
    """The entries act_fn returned, in call order."""

    def __post_init__(self) -> None:
        n, calls = len(self.actions), len(self.costs)
        if self.states.shape[0] != n or n not in (calls, calls + 1) or n == 0:
            raise ValueError(
                f"episode with {n} actions, {self.states.shape[0]} states and {calls} costs: "
                "need one state per action and one action per call (+ a final stop)"
            )


def returns(episode: Episode, settings: OrchestratorSettings) -> torch.Tensor:
    """G_t per decision: call t costs -λ c_t at decision t, r comes at the last decision (module doc)."""
    rewards = [-settings.cost_weight * c for c in episode.costs]
    if len(rewards) < len(episode.actions):  # the policy chose stop: a decision without a cost
        rewards.append(0.0)
    rewards[-1] += episode.reward
    out = [0.0] * len(rewards)
    g = 0.0
    for t in reversed(range(len(rewards))):
        g = rewards[t] + settings.gamma * g
        out[t] = g
    return torch.tensor(out, dtype=torch.float64)


def reinforce_update(
    policy: OrchestratorPolicy,
    optimizer: torch.optim.Optimizer,
    episodes: Sequence[Episode],
    settings: OrchestratorSettings,
    baseline: float | None,
) -> tuple[dict[str, float], float]:
    """One optimizer step on the REINFORCE loss over every decision of `episodes`.

    `baseline`: b from the last update (None: the first, b = this batch's mean return). Returns the
    stats and the new b (the caller keeps it). `grad_norm` is the norm measured before clipping.
    """
    if not episodes:
        raise ValueError("reinforce_update needs at least one episode")
    device = next(policy.parameters()).device
    g = [returns(e, settings) for e in episodes]
    mean_return = sum(r[0].item() for r in g) / len(g)
    b = mean_return if baseline is None else baseline
    states = torch.cat([e.states for e in episodes]).to(device)
    actions = torch.cat([e.actions for e in episodes]).to(device)
    steps = torch.cat([torch.arange(len(e.actions)) for e in episodes]).to(device)
    advantages = (torch.cat(g) - b).to(device=device, dtype=states.dtype)

    dist = policy.distribution(states, action_mask(steps, policy.n_agents, settings.max_steps))
    entropy = dist.entropy().mean()
    loss = -(advantages * dist.log_prob(actions)).mean() - settings.entropy_coef * entropy
    if not math.isfinite(loss.item()):
        raise TrainingFailed(f"non-finite orchestrator loss {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), settings.grad_clip).item()
    if not math.isfinite(grad_norm):
        raise TrainingFailed("non-finite orchestrator gradient norm")
    optimizer.step()

    m = settings.baseline_momentum
    stats = {
        "loss": loss.item(),
        "entropy": entropy.item(),
        "return": mean_return,
        "reward": sum(e.reward for e in episodes) / len(episodes),
        "cost": sum(sum(e.costs) for e in episodes) / len(episodes),
        "length": sum(len(e.costs) for e in episodes) / len(episodes),
        "grad_norm": grad_norm,
        "baseline": b,
    }
    return stats, m * b + (1 - m) * mean_return


def adam(policy: OrchestratorPolicy, settings: OrchestratorSettings) -> torch.optim.Adam:
    """The optimizer `reinforce_update` steps."""
    return torch.optim.Adam(policy.parameters(), lr=settings.lr)


StateFn = Callable[[tuple[Any, ...]], torch.Tensor]
"""state_fn(transcript) -> [dim] embedding of the task (the caller's) and the transcript so far."""
ActFn = Callable[[int, tuple[Any, ...]], tuple[Any, float]]
"""act_fn(agent index, transcript) -> (the agent's transcript entry, the call's cost)."""
ScoreFn = Callable[[tuple[Any, ...]], float]
"""score_fn(final transcript) -> r, the task's success."""

BatchStateFn = Callable[[Sequence[tuple[int, tuple[Any, ...]]]], torch.Tensor]
"""states_fn([(episode, transcript)]) -> [len, dim]: the states of the episodes still running."""
BatchActFn = Callable[[Sequence[tuple[int, int, tuple[Any, ...]]]], Sequence[tuple[Any, float]]]
"""acts_fn([(episode, agent index, transcript)]) -> [(entry, cost)]: one batch of calls."""
BatchScoreFn = Callable[[Sequence[tuple[int, tuple[Any, ...]]]], Sequence[float]]
"""scores_fn([(episode, final transcript)]) -> r of each episode."""


def rollout_batch(
    policy: OrchestratorPolicy,
    episodes: int,
    states_fn: BatchStateFn,
    acts_fn: BatchActFn,
    scores_fn: BatchScoreFn,
    settings: OrchestratorSettings,
    generator: torch.Generator,
    greedy: bool = False,
) -> list[Episode]:
    """Run `episodes` episodes in lockstep: at each decision every running episode is embedded in
    one call, picks (sampled with the CPU `generator` in episode order, or argmax), and the chosen
    calls of all episodes go to `acts_fn` as one batch (one generate call for the agents)."""
    param = next(policy.parameters())
    transcripts: list[list[Any]] = [[] for _ in range(episodes)]
    states: list[list[torch.Tensor]] = [[] for _ in range(episodes)]
    actions: list[list[int]] = [[] for _ in range(episodes)]
    costs: list[list[float]] = [[] for _ in range(episodes)]
    running = list(range(episodes))
    for step in range(settings.max_steps):  # at max_steps only stop is allowed: no decision
        if not running:
            break
        batch = states_fn([(i, tuple(transcripts[i])) for i in running]).detach()
        batch = batch.to(device=param.device, dtype=param.dtype)
        mask = action_mask(torch.full((len(running),), step), policy.n_agents, settings.max_steps)
        with torch.no_grad():
            probs = policy.distribution(batch, mask.to(param.device)).probs.float().cpu()
        calls = []
        for row, i in enumerate(running):
            if greedy:
                action = int(probs[row].argmax())
            else:
                action = int(torch.multinomial(probs[row], 1, generator=generator))
            states[i].append(batch[row])
            actions[i].append(action)
            if action != policy.stop:
                calls.append((i, action, tuple(transcripts[i])))
        for (i, _, _), (entry, cost) in zip(calls, acts_fn(calls), strict=True):
            transcripts[i].append(entry)
            costs[i].append(float(cost))
        running = [i for i, _, _ in calls]
    finals = [(i, tuple(t)) for i, t in enumerate(transcripts)]
    rewards = scores_fn(finals)
    return [
        Episode(
            states=torch.stack(states[i]),
            actions=torch.tensor(actions[i], dtype=torch.long),
            costs=tuple(costs[i]),
            reward=float(rewards[i]),
            transcript=finals[i][1],
        )
        for i in range(episodes)
    ]


def rollout_episode(
    policy: OrchestratorPolicy,
    state_fn: StateFn,
    act_fn: ActFn,
    score_fn: ScoreFn,
    settings: OrchestratorSettings,
    generator: torch.Generator,
    greedy: bool = False,
) -> Episode:
    """One episode: embed, pick (sampled with the CPU `generator`, or argmax), call, until stop.

    The task lives in the caller's closures; the policy only ever sees `state_fn`'s embeddings.
    """
    (episode,) = rollout_batch(
        policy,
        1,
        lambda batch: torch.stack([state_fn(t) for _, t in batch]),
        lambda calls: [act_fn(a, t) for _, a, t in calls],
        lambda finals: [score_fn(t) for _, t in finals],
        settings,
        generator,
        greedy,
    )
    return episode
