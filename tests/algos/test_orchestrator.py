"""The learned orchestrator: returns, mask and clip on hand-made numbers; REINFORCE on synthetic pools."""

import random
from dataclasses import replace

import pytest
import torch

from orchestry.algos.orchestrator import (
    Episode,
    OrchestratorPolicy,
    OrchestratorSettings,
    action_mask,
    adam,
    reinforce_update,
    returns,
    rollout_batch,
    rollout_episode,
)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: a second thread only waits on a busy core (20x slower when the machine is loaded)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SETTINGS = OrchestratorSettings(
    lr=0.02,
    gamma=1.0,
    entropy_coef=0.01,
    baseline_momentum=0.9,
    grad_clip=1.0,
    cost_weight=0.0,
    max_steps=1,
)


def train(policy, env, settings, updates, batch, seed):
    """`updates` REINFORCE steps of `batch` sampled episodes; env(i) -> (state_fn, act_fn, score_fn)."""
    gen = torch.Generator().manual_seed(seed)
    opt = adam(policy, settings)
    baseline = None
    history = []
    for u in range(updates):
        eps = [rollout_episode(policy, *env(u * batch + i), settings, gen) for i in range(batch)]
        stats, baseline = reinforce_update(policy, opt, eps, settings, baseline)
        history.append(stats)
    return history


def bandit_env(contexts, success, rng, costs=None):
    """One call then stop (max_steps=1): episode i sees context i % len(contexts)."""

    def env(i):
        c = i % len(contexts)
        return (
            lambda transcript: contexts[c],
            lambda agent, transcript: (agent, 1.0 if costs is None else costs[agent]),
            lambda transcript: float(rng.random() < success[c][transcript[0]]),
        )

    return env


def first_probs(policy, context):
    """pi(. | context) at the first decision (stop masked)."""
    mask = action_mask(torch.tensor([0]), policy.n_agents, 1)
    with torch.no_grad():
        return policy.distribution(context[None], mask).probs[0]


def test_returns_charge_each_cost_at_its_call_and_r_at_the_end():
    s = replace(SETTINGS, gamma=0.5, cost_weight=0.1, max_steps=5)
    stopped = Episode(torch.zeros(4, 2), torch.tensor([0, 1, 0, 2]), (1.0, 2.0, 3.0), 1.0, ())
    # rewards [-0.1, -0.2, -0.3, 1.0 (stop)]: G_3 = 1, G_2 = -0.3 + 0.5, G_1 = -0.2 + 0.1, G_0 = -0.1 - 0.05
    assert torch.allclose(returns(stopped, s), torch.tensor([-0.15, -0.1, 0.2, 1.0]).double())
    forced = Episode(torch.zeros(2, 2), torch.tensor([0, 1]), (1.0, 1.0), 1.0, ())
    # no stop decision: r lands on the last call's decision, with its cost: [-0.1, 0.9]
    assert torch.allclose(returns(forced, s), torch.tensor([0.35, 0.9]).double())
    # gamma = 1: G_0 is r - λ·C
    g0 = returns(stopped, replace(s, gamma=1.0))[0].item()
    assert g0 == pytest.approx(1.0 - 0.1 * 6.0)


def test_episode_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="one action per call"):
        Episode(torch.zeros(3, 2), torch.tensor([0, 0, 0]), (1.0,), 0.0, ())


def test_mask_forbids_stop_first_and_forces_it_at_max_steps():
    mask = action_mask(torch.tensor([0, 1, 3]), n_agents=2, max_steps=3)
    assert mask.tolist() == [[True, True, False], [True, True, True], [False, False, True]]
    torch.manual_seed(0)
    policy = OrchestratorPolicy(dim=4, n_agents=2, hidden=8)
    probs = policy.distribution(torch.randn(3, 4), mask).probs
    assert probs[0, 2] == 0 and probs[2, :2].sum() == 0 and probs[2, 2] == 1

    s = replace(SETTINGS, max_steps=3)
    gen = torch.Generator().manual_seed(0)
    never_stop, always_stop = OrchestratorPolicy(4, 2, 8), OrchestratorPolicy(4, 2, 8)
    with torch.no_grad():
        never_stop.head[-1].bias.copy_(torch.tensor([0.0, 0.0, -50.0]))
        always_stop.head[-1].bias.copy_(torch.tensor([0.0, 0.0, 50.0]))
    fns = (lambda t: torch.ones(4), lambda a, t: (a, 1.0), lambda t: 0.0)
    forced = rollout_episode(never_stop, *fns, s, gen)
    assert len(forced.costs) == len(forced.actions) == 3  # three calls, no stop decision
    early = rollout_episode(always_stop, *fns, s, gen)
    assert len(early.costs) == 1 and early.actions.tolist()[-1] == 2  # one call, then stop


def test_update_clips_the_gradient():
    torch.manual_seed(0)
    policy = OrchestratorPolicy(dim=4, n_agents=3, hidden=16)
    s = replace(SETTINGS, grad_clip=1e-3)
    eps = [
        Episode(torch.randn(1, 4), torch.tensor([a]), (1.0,), float(a == 0), (a,)) for a in range(3)
    ]
    stats, baseline = reinforce_update(policy, adam(policy, s), eps, s, baseline=0.0)
    # stats["grad_norm"] is measured before clipping; the gradient the step used is clipped
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in policy.parameters()]))
    assert stats["grad_norm"] > s.grad_clip
    assert after.item() <= s.grad_clip * (1 + 1e-4)
    assert baseline == pytest.approx(0.1 * (1 / 3))  # 0.9·0 + 0.1·mean return
    assert set(stats) >= {"loss", "entropy", "return", "cost", "length", "grad_norm"}


def test_reinforce_finds_the_best_agent_in_each_state():
    gen = torch.Generator().manual_seed(1)
    contexts = torch.randn(3, 8, generator=gen)
    success = [[0.9, 0.2, 0.4, 0.1], [0.1, 0.3, 0.2, 0.9], [0.3, 0.8, 0.1, 0.2]]
    torch.manual_seed(0)
    policy = OrchestratorPolicy(dim=8, n_agents=4, hidden=32)
    train(policy, bandit_env(contexts, success, random.Random(0)), SETTINGS, 200, 12, seed=0)
    for c, probs in zip(contexts, success, strict=True):
        p = first_probs(policy, c)
        best = max(range(4), key=lambda a: probs[a])
        assert int(p.argmax()) == best and p[best] > 0.9


@pytest.mark.slow
def test_cost_weight_shifts_choice_to_the_cheap_agent():
    context = torch.ones(1, 4)
    success = [[0.8, 0.9]]  # agent 0: cheap (cost 1), agent 1: expensive (cost 10)
    # expected returns 0.8 - λ and 0.9 - 10λ: the expensive agent is worth it below λ* = 0.1 / 9
    lambdas = (0.0, 0.005, 0.02, 0.05)
    p_cheap = []
    for lam in lambdas:
        torch.manual_seed(0)
        policy = OrchestratorPolicy(dim=4, n_agents=2, hidden=16)
        env = bandit_env(context, success, random.Random(0), costs=[1.0, 10.0])
        train(policy, env, replace(SETTINGS, cost_weight=lam), 200, 16, seed=0)
        p_cheap.append(first_probs(policy, context[0])[0].item())
    below = [p for lam, p in zip(lambdas, p_cheap, strict=True) if lam < 0.1 / 9]
    above = [p for lam, p in zip(lambdas, p_cheap, strict=True) if lam > 0.1 / 9]
    # both sides converge (p within 1e-2 of 0 or 1), so the order within a side is noise:
    # the test pins the switch instead
    assert max(below) < 0.1 and min(above) > 0.9, p_cheap


A, B, C = 0, 1, 2


def ordered_env(i):
    """Success iff an A call is later followed by a B call; the state shows enough to act on."""

    def done(transcript):
        return A in transcript and B in transcript[transcript.index(A) :]

    def state(transcript):
        last = torch.zeros(4)
        last[transcript[-1] if transcript else 3] = 1
        step = torch.zeros(5)
        step[len(transcript)] = 1
        flags = torch.tensor([float(A in transcript), float(done(transcript))])
        return torch.cat([last, flags, step])

    return state, lambda agent, transcript: (agent, 1.0), lambda t: float(done(t))


def test_learns_the_order_and_to_stop_after_it():
    s = replace(SETTINGS, cost_weight=0.1, max_steps=4)  # each call costs 1: 0.1 of a success
    torch.manual_seed(0)
    policy = OrchestratorPolicy(dim=11, n_agents=3, hidden=32)
    history = train(policy, ordered_env, s, 150, 16, seed=0)
    lengths = [h["length"] for h in history]
    assert sum(lengths[:10]) / 10 > 2.5 and sum(lengths[-10:]) / 10 < 2.1
    greedy = rollout_episode(policy, *ordered_env(0), s, torch.Generator(), greedy=True)
    assert greedy.transcript == (A, B) and greedy.actions.tolist() == [A, B, policy.stop]
    assert greedy.reward == 1.0


def test_same_seeds_give_the_same_parameters():
    def run():
        torch.manual_seed(3)
        policy = OrchestratorPolicy(dim=11, n_agents=3, hidden=16)
        train(policy, ordered_env, replace(SETTINGS, max_steps=4), 20, 8, seed=5)
        return [p.detach().clone() for p in policy.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(run(), run(), strict=True))


def test_batch_rollout_runs_episodes_in_lockstep():
    """Every running episode is embedded and called in one batch per decision; each stops on its own."""
    s = replace(SETTINGS, max_steps=3)
    policy = OrchestratorPolicy(dim=3, n_agents=2, hidden=8)
    policy.head = torch.nn.Linear(3, 3, bias=False)  # logits = W s
    with torch.no_grad():  # the state's first entry says "stop now" (when allowed), else agent 0
        policy.head.weight.copy_(
            torch.tensor([[0.0, 10.0, 0.0], [0.0, 0.0, 0.0], [50.0, 0.0, 0.0]])
        )
    stop_after = [1, 3, 2]  # episode i stops after this many calls (3: forced)
    state_batches, act_batches = [], []

    def states(batch):
        state_batches.append([i for i, _ in batch])
        return torch.tensor([[float(len(t) >= stop_after[i]), 1.0, 0.0] for i, t in batch])

    def acts(calls):
        act_batches.append([(i, a) for i, a, _ in calls])
        return [((i, a), 2.0) for i, a, _ in calls]

    eps = rollout_batch(
        policy, 3, states, acts, lambda f: [float(i) for i, _ in f], s, torch.Generator(), True
    )
    assert state_batches == [[0, 1, 2], [0, 1, 2], [1, 2]]
    assert act_batches == [[(0, 0), (1, 0), (2, 0)], [(1, 0), (2, 0)], [(1, 0)]]
    assert [len(e.costs) for e in eps] == [1, 3, 2] and [e.reward for e in eps] == [0, 1, 2]
    assert [e.actions.tolist()[-1] for e in eps] == [2, 0, 2]  # stop, forced end, stop
    assert eps[1].transcript == ((1, 0), (1, 0), (1, 0))
