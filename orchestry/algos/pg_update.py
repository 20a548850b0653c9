"""One policy-gradient step per adapter: micro-batches, the MAGRPO loss, optional KL, clip, schedule.

Each agent's adapter is stepped on its own completions, -A * log pi (`magrpo.policy_loss`), averaged
over all of that adapter's rows of the step; with a shared adapter one optimizer sees every agent's
rows. Rows whose advantage is 0 carry no policy gradient and are skipped (unless the KL term is on).

Data-parallel (several processes, each with its share of the step's rows): the `ranks` reduction
sums the row counts first, so every rank divides by the step's global count, then sums the gradients
before the clip, so every rank's optimizer takes the same step as one process holding all the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from orchestry.agents.lora.memory_plan import MIXED_TOKENS_PER_ROW
from orchestry.algos.failure import TrainingFailed
from orchestry.algos.magrpo import Row, RowLoss, kl_k3, policy_loss


class Trainable(Protocol):
    """What the update needs of a policy (the LoRA team implements it)."""

    def trainable_parameters(self, agent: str) -> list[torch.nn.Parameter]: ...

    def token_logprobs(
        self,
        agent: str,
        prompts: Sequence[list[int]],
        completions: Sequence[list[int]],
        grad: bool = ...,
        reference: bool = ...,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def locate_nonfinite(
        self, owner: str, rows: Sequence[tuple[str, list[int], list[int]]]
    ) -> str: ...


class StepReduction(Protocol):
    """How data-parallel ranks combine one update (`agents/lora/dist.World` implements it).

    Every rank calls each method in the same order, also a rank without rows of its own."""

    def sum_values(self, values: Sequence[float]) -> list[float]: ...

    def sum_grads(self, params: Sequence[torch.nn.Parameter]) -> None: ...


@dataclass(frozen=True)
class OptimizerSettings:
    lr: float
    weight_decay: float
    schedule: Literal["constant", "linear", "cosine"]
    warmup_steps: int


@dataclass(frozen=True)
class UpdateSettings:
    logprob_reduction: Literal["sum", "token_mean"]
    kl_coef: float
    grad_clip: float
    microbatch: int
    shared_adapter: bool


def lr_lambda(schedule: str, warmup: int, total: int) -> Callable[[int], float]:
    """Linear warm-up, then constant / linear decay / cosine decay to zero at `total` steps."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return (
            1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        )

    return factor


@dataclass
class Optimizers:
    """One AdamW + scheduler per trained adapter (one in total with a shared adapter)."""

    optimizers: dict[str, torch.optim.Optimizer]
    schedulers: dict[str, torch.optim.lr_scheduler.LambdaLR]

    @classmethod
    def create(
        cls,
        policy: Trainable,
        agents: Sequence[str],
        shared: bool,
        settings: OptimizerSettings,
        total: int,
    ) -> Optimizers:
        owners = list(agents[:1] if shared else agents)
        opts = {}
        for a in owners:
            params = policy.trainable_parameters(a)
            # One fused kernel for the whole step on a GPU; the CPU keeps the reference loop.
            fused = all(p.is_cuda for p in params) or None
            opts[a] = torch.optim.AdamW(
                params, lr=settings.lr, weight_decay=settings.weight_decay, fused=fused
            )
        scheds = {
            a: torch.optim.lr_scheduler.LambdaLR(
                o, lr_lambda(settings.schedule, settings.warmup_steps, total)
            )
            for a, o in opts.items()
        }
        return cls(opts, scheds)

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizers": {a: o.state_dict() for a, o in self.optimizers.items()},
            "schedulers": {a: s.state_dict() for a, s in self.schedulers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for a, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][a])
        for a, s in self.schedulers.items():
            s.load_state_dict(state["schedulers"][a])


def update_agents(
    policy: Trainable,
    opts: Optimizers,
    rows: dict[str, list[Row]],
    settings: UpdateSettings,
    ranks: StepReduction | None = None,
    step: int | None = None,
) -> dict[str, float]:
    """One optimizer step per adapter on -A * log pi; rows with A == 0 or no tokens carry no gradient.

    `ranks`: the data-parallel reduction when `rows` are this process's share of the step (None: this
    process holds all of them). Losses and stats are then the step's, over every rank's rows.
    `step`: the training step, named when the loss or gradient goes non-finite (`TrainingFailed`).
    """
    # decided on the adapters, not on this process's rows: a rank may hold none, and every rank must
    # take the same path (the same collectives)
    mixed = getattr(policy, "mixes", None)
    owners = list(opts.optimizers)
    if not settings.shared_adapter and settings.kl_coef == 0 and mixed and mixed(owners):
        return _update_mixed(policy, opts, rows, settings, ranks, step)
    stats: dict[str, float] = {}
    for owner, opt in opts.optimizers.items():
        agents = list(rows) if settings.shared_adapter else [owner]
        opt.zero_grad(set_to_none=True)
        n_rows = sum(len(rows.get(a, [])) for a in agents)
        # rows with A == 0 carry no policy gradient; with the KL term every row counts
        live = {
            a: [
                r
                for r in rows.get(a, [])
                if len(r[1]) > 0 and (r[2] != 0.0 or settings.kl_coef > 0)
            ]
            for a in agents
        }
        n_live = sum(len(v) for v in live.values())
        if ranks is not None:  # the loss averages over every rank's rows of this adapter
            n_rows, n_live = (round(v) for v in ranks.sum_values([n_rows, n_live]))
        # Sums stay on the device (float64, summed in order, as Python floats would be): one
        # host sync per optimizer step instead of one per micro-batch.
        loss_sum: torch.Tensor | float = 0.0
        kl_sum: torch.Tensor | float = 0.0
        kl_rows = 0
        for agent in agents:
            for i in range(0, len(live[agent]), settings.microbatch):
                chunk = live[agent][i : i + settings.microbatch]
                prompts, completions = [r[0] for r in chunk], [r[1] for r in chunk]
                tok_logp, mask = policy.token_logprobs(agent, prompts, completions, grad=True)
                adv = torch.tensor(
                    [r[2] for r in chunk], dtype=tok_logp.dtype, device=tok_logp.device
                )
                # policy_loss averages over the chunk; rescale so the step averages over all n_rows
                share = len(chunk) / max(1, n_rows)
                loss = (
                    policy_loss(adv, tok_logp.sum(-1), mask.sum(-1), settings.logprob_reduction)
                    * share
                )
                if settings.kl_coef > 0:
                    with torch.no_grad():
                        ref_logp, _ = policy.token_logprobs(
                            agent, prompts, completions, grad=False, reference=True
                        )
                    kl = kl_k3(tok_logp, ref_logp, mask)
                    loss = loss + settings.kl_coef * kl.mean() * share
                    kl_sum = kl_sum + kl.detach().sum().double()
                    kl_rows += len(chunk)
                loss.backward()
                loss_sum = loss_sum + loss.detach().double()
        params_list = [p for p in opt.param_groups[0]["params"]]
        if ranks is not None:
            # Every rank decides on the same global values below, so all raise or all step together.
            loss_sum, kl_sum, kl_rows = ranks.sum_values([float(loss_sum), float(kl_sum), kl_rows])
            if n_live:  # with no live row anywhere no rank has a gradient: leave them all None
                ranks.sum_grads(params_list)
        failed = _Failure(policy, step, [(a, r[0], r[1]) for a in agents for r in live[a]])
        _step(opts, owner, params_list, float(loss_sum), settings.grad_clip, stats, failed)
        if settings.kl_coef > 0:
            stats[f"kl/{owner}"] = float(kl_sum) / max(1, kl_rows)
    return stats


def _chunks(live: list[tuple[str, Row]], microbatch: int) -> list[list[tuple[str, Row]]]:
    """`live` in order, cut into passes of at most `microbatch` rows and at most
    `MIXED_TOKENS_PER_ROW` x `microbatch` padded tokens, counted as the pass lays them out."""
    cap = microbatch * MIXED_TOKENS_PER_ROW

    def tokens(chunk: list[tuple[str, Row]]) -> int:
        prompts = {(a, tuple(r[0])) for a, r in chunk}
        width_p = max(len(p) for _, p in prompts)
        return len(prompts) * width_p + len(chunk) * max(len(r[1]) for _, r in chunk)

    chunks: list[list[tuple[str, Row]]] = []
    for item in live:
        if chunks and len(chunks[-1]) < microbatch and tokens([*chunks[-1], item]) <= cap:
            chunks[-1].append(item)
        else:
            chunks.append([item])
    return chunks


def _update_mixed(
    policy: Any,
    opts: Optimizers,
    rows: dict[str, list[Row]],
    settings: UpdateSettings,
    ranks: StepReduction | None,
    step: int | None,
) -> dict[str, float]:
    """`update_agents` with every adapter's rows in the same passes (`policy.mixed_backward`: the
    written-out forward, recorded as CUDA graphs on a GPU). Each adapter's loss is its own rows'
    share, as above; the adapters' parameters are disjoint, so one backward of the sum gives each
    its own gradient."""
    owners = list(opts.optimizers)
    live = [
        (agent, r) for agent in owners for r in rows.get(agent, []) if len(r[1]) and r[2] != 0.0
    ]
    counts = [len(rows.get(a, [])) for a in owners]
    counts += [sum(a == o for a, _ in live) for o in owners]
    if ranks is not None:  # every rank's rows (and live rows) of each adapter
        counts = [round(v) for v in ranks.sum_values(counts)]
    n_rows = dict(zip(owners, counts[: len(owners)], strict=True))
    n_live = dict(zip(owners, counts[len(owners) :], strict=True))
    for opt in opts.optimizers.values():
        opt.zero_grad(set_to_none=True)
    loss_sums: dict[str, torch.Tensor | float] = dict.fromkeys(owners, 0.0)
    row_loss = RowLoss(settings.logprob_reduction)
    for chunk in _chunks(live, settings.microbatch):
        agents = [a for a, _ in chunk]
        # each row's loss weighs 1 / its adapter's rows, so the step averages over all of them
        losses = policy.mixed_backward(
            owners,
            agents,
            [r[0] for _, r in chunk],
            [r[1] for _, r in chunk],
            [r[2] for _, r in chunk],
            [1.0 / max(1, n_rows[a]) for a in agents],
            row_loss,
        )
        # `live` lists the rows adapter by adapter, so each adapter's rows of a chunk are one
        # run: a slice, where an index tensor made on the host would wait for the GPU (a copy
        # to the device waits for the kernels queued before it, here the previous pass)
        for owner in dict.fromkeys(agents):
            first = agents.index(owner)
            rows_of = losses[first : first + agents.count(owner)].clone()
            loss_sums[owner] = loss_sums[owner] + rows_of.sum().double()
    stats: dict[str, float] = {}
    values = [float(loss_sums[o]) for o in owners]
    if ranks is not None:
        values = ranks.sum_values(values)
    for owner, loss_total in zip(owners, values, strict=True):
        params_list = list(opts.optimizers[owner].param_groups[0]["params"])
        if ranks is not None and n_live[owner]:  # none live anywhere: every gradient stays None
            ranks.sum_grads(params_list)
        mine = [(a, r[0], r[1]) for a, r in live if a == owner]
        failed = _Failure(policy, step, mine)
        _step(opts, owner, params_list, loss_total, settings.grad_clip, stats, failed)
    return stats


@dataclass(frozen=True)
class _Failure:
    """What a non-finite loss or gradient is reported with: the step and the adapter's live rows
    (agent, prompt, completion) of this process, which the policy searches for the bad one."""

    policy: Trainable
    step: int | None
    rows: list[tuple[str, list[int], list[int]]]

    def error(self, owner: str, what: str) -> TrainingFailed:
        where = "" if self.step is None else f"step {self.step}: "
        detail = self.policy.locate_nonfinite(owner, self.rows)
        return TrainingFailed(f"{where}non-finite {what}; {detail}")


def _step(
    opts: Optimizers,
    owner: str,
    params: list[torch.nn.Parameter],
    loss_total: float,
    grad_clip: float,
    stats: dict[str, float],
    failed: _Failure,
) -> None:
    """Check the step's loss and gradient are finite, clip, step the adapter and its schedule, and
    record the loss and the gradient norm in `stats`."""
    if not math.isfinite(loss_total):
        raise failed.error(owner, f"loss for adapter {owner}: {loss_total}")
    grad_norm = torch.nn.utils.clip_grad_norm_(params, grad_clip).item()
    if not math.isfinite(grad_norm):
        raise failed.error(owner, f"gradient norm for adapter {owner}")
    opts.optimizers[owner].step()
    opts.schedulers[owner].step()
    stats[f"loss/{owner}"] = loss_total
    stats[f"grad_norm/{owner}"] = grad_norm
