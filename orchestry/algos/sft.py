"""The supervised warm start (issue 57): LoRA fine-tuning on the training problems' reference
solutions before RL, so that RL starts from agents that can write the parts.

Each agent learns the answer its role has in the team, prompted exactly as the team prompts it
(`env.observe` with no history): a helper its reference helper, main the reference entry point;
the single agent (`envs/solo.SoloEnv`, its one role `main`) the whole reference program, helpers
first. An answer is the code fenced as ```python ... ``` (the form `env.act` reads), docstrings
stripped (the model copied the docstring and ran out of tokens: issue 57's probe), then the end of
sequence. The loss is the mean negative log-likelihood of the answer tokens only; the prompt is the
condition. Each agent has its own AdamW and takes `epochs` passes over its rows in batches of
`batch_rows`, rows shuffled each epoch from `seed`; every agent sees the same problems, epochs and
learning rate, so a team and a single agent warm-started here differ by their roles alone (and by
the team's two adapters taking twice the optimizer steps: the control the pre-registration names).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from orchestry.envs.code.answers import answer_text, solo_program


@dataclass(frozen=True)
class SftSettings:
    epochs: int
    """Passes over each agent's rows."""
    lr: float
    """AdamW learning rate (constant)."""
    batch_rows: int
    """Rows of one agent per optimizer step."""
    seed: int
    """Seeds each epoch's shuffle."""
    weight_decay: float = 0.0


@dataclass(frozen=True)
class SftRow:
    """One supervised example: `agent`'s prompt tokens and the answer tokens it should write."""

    agent: str
    problem_id: str
    prompt_ids: list[int]
    answer_ids: list[int]


class Policy(Protocol):
    """What the warm start uses of the LoRA team (`agents/lora/team.TeamPolicy`)."""

    def prompt_ids(self, agent: str, messages: list[dict[str, str]]) -> list[int]: ...
    def adapter_name(self, agent: str) -> str: ...
    def tokenizer(self, agent: str) -> Any: ...
    def trainable_parameters(self, agent: str) -> list[torch.nn.Parameter]: ...
    def sequence_logprobs(
        self,
        agent: str,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        grad: bool,
        reduction: str = "sum",
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def answer_ids(policy: Policy, agent: str, text: str) -> list[int]:
    """`text`'s tokens as the agent would write them, then its end of sequence."""
    tokenizer = policy.tokenizer(agent)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return ids + [tokenizer.eos_token_id]


def team_rows(policy: Policy, env: Any, tasks: Sequence[Any]) -> list[SftRow]:
    """Each role's reference answer under each task, prompted as the team prompts that role; a
    task without a reference for a role gives that role no row."""
    rows = []
    for task in tasks:
        for agent in (*env.roles.helpers, env.roles.main):
            code = env.reference(task, agent)
            if code:
                prompt = policy.prompt_ids(agent, env.observe(task, agent))
                answer = answer_ids(policy, agent, answer_text(code))
                rows.append(SftRow(agent, task.id, prompt, answer))
    return rows


def solo_rows(policy: Policy, solo_env: Any, team_env: Any, tasks: Sequence[Any]) -> list[SftRow]:
    """The single agent's rows: the team's reference parts joined (helpers first, as the joint
    program is), prompted as the single agent is prompted; a task missing a part gives none."""
    agent = solo_env.roles.main
    rows = []
    for task in tasks:
        roles = (*team_env.roles.helpers, team_env.roles.main)
        parts = [team_env.reference(task, role) for role in roles]
        if all(parts):
            program = solo_program(parts)
            prompt = policy.prompt_ids(agent, solo_env.observe(task, agent))
            answer = answer_ids(policy, agent, answer_text(program))
            rows.append(SftRow(agent, task.id, prompt, answer))
    return rows


def over_budget(rows: Sequence[SftRow], max_new_tokens: int) -> dict[str, list[str]]:
    """Problem id -> the agents whose taught answer (its end of sequence included) is longer than
    `max_new_tokens`: an agent could never write it whole, so the problem is dropped, and counted,
    before the warm start and the held-out sets use it (issue 57: the budget cut answers off)."""
    long: dict[str, list[str]] = {}
    for row in rows:
        if len(row.answer_ids) > max_new_tokens:
            long.setdefault(row.problem_id, []).append(row.agent)
    return long


def answer_loss(policy: Policy, rows: Sequence[SftRow], grad: bool) -> torch.Tensor:
    """The mean negative log-likelihood per answer token of `rows` (of one adapter: one agent's,
    or several agents' sharing one, each row under its own agent's prompt)."""
    total, tokens = None, 0
    for agent in dict.fromkeys(r.agent for r in rows):
        own = [r for r in rows if r.agent == agent]
        logprobs, counts = policy.sequence_logprobs(
            agent, [r.prompt_ids for r in own], [r.answer_ids for r in own], grad=grad
        )
        total = -logprobs.sum() if total is None else total - logprobs.sum()
        tokens += int(counts.sum())
    assert total is not None, "answer_loss of no rows"
    return total / max(tokens, 1)


def supervised_epochs(
    policy: Policy, rows: Sequence[SftRow], settings: SftSettings
) -> list[dict[str, Any]]:
    """Train each adapter on its rows (an agent's; a shared adapter's: its agents' rows mixed in
    its batches); returns one record per optimizer step (agent: the adapter's name, which is the
    agent's own unless shared; epoch, step, loss, tokens). Raises FloatingPointError naming the
    adapter and step when a loss is not finite (never a silent skip)."""
    by_agent: dict[str, list[SftRow]] = {}
    for row in rows:
        by_agent.setdefault(policy.adapter_name(row.agent), []).append(row)
    history: list[dict[str, Any]] = []
    for agent, own in by_agent.items():
        params = policy.trainable_parameters(own[0].agent)
        optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
        order = random.Random(settings.seed)
        step = 0
        for epoch in range(settings.epochs):
            shuffled = list(own)
            order.shuffle(shuffled)
            for start in range(0, len(shuffled), settings.batch_rows):
                batch = shuffled[start : start + settings.batch_rows]
                loss = answer_loss(policy, batch, grad=True)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"sft: {agent}'s loss is {loss.item()} at step {step}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                tokens = sum(len(r.answer_ids) for r in batch)
                history.append(
                    {
                        "agent": agent,
                        "epoch": epoch,
                        "step": step,
                        "loss": loss.item(),
                        "tokens": tokens,
                    }
                )
                step += 1
        optimizer.zero_grad(set_to_none=True)
    return history
