"""The evaluation protocols: how a method turns problems into programs, n samples per problem.

- `team`          the agents answer their own prompts independently (aligned joint actions). With the
                  untrained base this is the paper's *naive concatenation* baseline; with the MAGRPO
                  adapters it is the trained team.
- `single`        one model writes the whole entry point (it may define its own helpers).
- `sequential`    helpers answer first; the main agent sees their code in its prompt.
- `discussion`    one round of discussion: each agent sees its teammates' first answers and revises.

Every protocol returns one row per sample (see `score_rows`) for `metrics.compute_metrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from orchestry.agents.base import Generation, Generator, GenRequest, SamplingSpec
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.prompts import (
    SYSTEM_PROMPT,
    Roles,
    agent_code,
    extract_code,
    initial_messages,
    next_messages,
)
from orchestry.envs.code.reward import JointAction, RewardWeights, score_joint_actions
from orchestry.envs.code.sandbox.runner import SandboxLimits

log = logging.getLogger("orchestry.eval.protocols")


class Scorer:
    """Scores joint actions in the sandbox with fixed weights and limits."""

    def __init__(self, weights: RewardWeights, limits: SandboxLimits, workers: int) -> None:
        self.weights, self.limits, self.workers = weights, limits, workers

    def rows(
        self,
        method: str,
        items: Sequence[tuple[Problem, int, dict[str, str], JointAction, float, int]],
    ) -> list[dict[str, Any]]:
        """items: (problem, sample index, code by agent, joint action, seconds, new tokens) per sample."""
        start = time.perf_counter()
        scored = score_joint_actions(
            [it[3] for it in items], self.weights, self.limits, self.workers
        )
        log.info(
            "scored %d joint programs in the sandbox in %.1f s",
            len(items),
            time.perf_counter() - start,
        )
        rows = []
        for (problem, idx, code, action, seconds, tokens), (reward, report) in zip(
            items, scored, strict=True
        ):
            facts = action.facts()
            rows.append(
                {
                    "method": method,
                    "problem_id": problem.id,
                    "helper_names": [h.name for h in problem.helpers],
                    "main_name": problem.main.name,
                    "sample": idx,
                    "code": code,
                    "program": action.program(),
                    "reward": reward.to_dict(),
                    "main_defined": facts.main_defined,
                    "correct": bool(report is not None and report.passed and all(report.passed)),
                    "n_passed": report.n_passed if report else 0,
                    "n_tests": len(problem.tests),
                    "first_failure": report.first_failure if report else None,
                    "seconds": seconds,
                    "new_tokens": tokens,
                }
            )
        return rows


def timed_generate(
    gen: Generator, requests: list[GenRequest], sampling: SamplingSpec
) -> tuple[list[Generation], float]:
    """Generate and return the wall time of the call (batched rows share it)."""
    rows = sum(r.n for r in requests)
    log.info(
        "generating %d completions (%d prompts, %d new tokens at most)",
        rows,
        len(requests),
        sampling.max_new_tokens,
    )
    start = time.perf_counter()
    out = gen.generate(requests, sampling)
    seconds = time.perf_counter() - start
    log.info("generated %d tokens in %.1f s", sum(g.new_tokens for g in out), seconds)
    return out, seconds


def _tokens(gen: Generation) -> list[int]:
    """New tokens per sample of one request (API agents report tokens only in total)."""
    n = max(1, len(gen.texts))
    if len(gen.token_ids) == len(gen.texts) and any(gen.token_ids):
        return [len(ids) for ids in gen.token_ids]
    return [gen.new_tokens // n] * len(gen.texts)


def team(
    gen: Generator,
    problems: Sequence[Problem],
    roles: Roles,
    n: int,
    sampling: SamplingSpec,
    scorer: Scorer,
    method: str,
) -> list[dict[str, Any]]:
    """Every agent answers its own prompt; the i-th samples form joint sample i."""
    agents = roles.agents
    requests = [GenRequest(a, initial_messages(p, roles, a), n) for p in problems for a in agents]
    gens, wall = timed_generate(gen, requests, sampling)
    share = wall / (len(problems) * n)  # amortised generation seconds per joint sample
    items = []
    for pi, p in enumerate(problems):
        per = {a: gens[pi * len(agents) + ai] for ai, a in enumerate(agents)}
        for i in range(n):
            code = {a: agent_code(per[a].texts[i], p, roles, a) for a in agents}
            tokens = sum(_tokens(g)[i] for g in per.values())
            action = JointAction(p, tuple(code[a] for a in roles.helpers), code[roles.main])
            items.append((p, i, code, action, share, tokens))
    return scorer.rows(method, items)


def single_messages(problem: Problem) -> list[dict[str, str]]:
    user = (
        f"Task: {problem.prompt}\n\nWrite the complete function below (you may define helper "
        f"functions of your own):\n\n```python\n{problem.main.signature}\n```"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def single(
    gen: Generator,
    problems: Sequence[Problem],
    agent: str,
    n: int,
    sampling: SamplingSpec,
    scorer: Scorer,
) -> list[dict[str, Any]]:
    """One model writes the whole entry point."""
    requests = [GenRequest(agent, single_messages(p), n) for p in problems]
    gens, wall = timed_generate(gen, requests, sampling)
    share = wall / (len(problems) * n)
    items = []
    for p, g in zip(problems, gens, strict=True):
        tokens = _tokens(g)
        for i, text in enumerate(g.texts):
            code = extract_code(text, keep=[p.main.name])
            action = JointAction(p, tuple("" for _ in p.helpers), code)
            items.append((p, i, {agent: code}, action, share, tokens[i]))
    return scorer.rows("single", items)


def _with_teammates(messages: list[dict[str, str]], note: str) -> list[dict[str, str]]:
    head, last = messages[:-1], messages[-1]
    return [*head, {"role": last["role"], "content": f"{last['content']}\n\n{note}"}]


def sequential(
    gen: Generator,
    problems: Sequence[Problem],
    roles: Roles,
    n: int,
    sampling: SamplingSpec,
    scorer: Scorer,
) -> list[dict[str, Any]]:
    """Helpers answer first; the main agent sees their code."""
    h = len(roles.helpers)
    helper_reqs = [
        GenRequest(a, initial_messages(p, roles, a), n) for p in problems for a in roles.helpers
    ]
    helper_gens, wall1 = timed_generate(gen, helper_reqs, sampling)
    main_reqs, helper_code = [], []
    for pi, p in enumerate(problems):
        for i in range(n):
            code = {
                a: agent_code(helper_gens[pi * h + ai].texts[i], p, roles, a)
                for ai, a in enumerate(roles.helpers)
            }
            helper_code.append(code)
            shown = "\n\n".join(c for c in code.values() if c) or "# (the helper wrote no code)"
            note = f"Your teammates already wrote:\n\n```python\n{shown}\n```"
            messages = _with_teammates(initial_messages(p, roles, roles.main), note)
            main_reqs.append(GenRequest(roles.main, messages, 1))
    main_gens, wall2 = timed_generate(gen, main_reqs, sampling)
    share = (wall1 + wall2) / (len(problems) * n)
    items = []
    for pi, p in enumerate(problems):
        for i in range(n):
            k = pi * n + i
            mg = main_gens[k]
            code = {**helper_code[k], roles.main: agent_code(mg.texts[0], p, roles, roles.main)}
            tokens = _tokens(mg)[0] + sum(_tokens(helper_gens[pi * h + ai])[i] for ai in range(h))
            action = JointAction(p, tuple(code[a] for a in roles.helpers), code[roles.main])
            items.append((p, i, code, action, share, tokens))
    return scorer.rows("sequential", items)


def discussion(
    gen: Generator,
    problems: Sequence[Problem],
    roles: Roles,
    n: int,
    sampling: SamplingSpec,
    scorer: Scorer,
) -> list[dict[str, Any]]:
    """One round of discussion: each agent sees its teammates' first answers and revises."""
    agents = roles.agents
    first_reqs = [GenRequest(a, initial_messages(p, roles, a), n) for p in problems for a in agents]
    first, wall1 = timed_generate(gen, first_reqs, sampling)
    second_reqs, first_tokens = [], []
    for pi, p in enumerate(problems):
        per = {a: first[pi * len(agents) + ai] for ai, a in enumerate(agents)}
        for i in range(n):
            codes = {a: agent_code(per[a].texts[i], p, roles, a) for a in agents}
            first_tokens.append(sum(_tokens(g)[i] for g in per.values()))
            for a in agents:
                others = "\n\n".join(c for b, c in codes.items() if b != a and c) or "# (no code)"
                note = (
                    f"Your teammates answered:\n\n```python\n{others}\n```\n\n"
                    "Revise your own function so the team's program works, and answer with one "
                    "code block."
                )
                history = next_messages(initial_messages(p, roles, a), per[a].texts[i], note)
                second_reqs.append(GenRequest(a, history, 1))
    second, wall2 = timed_generate(gen, second_reqs, sampling)
    share = (wall1 + wall2) / (len(problems) * n)
    items = []
    for pi, p in enumerate(problems):
        for i in range(n):
            k = pi * n + i
            gs = {a: second[k * len(agents) + ai] for ai, a in enumerate(agents)}
            code = {a: agent_code(g.texts[0], p, roles, a) for a, g in gs.items()}
            tokens = first_tokens[k] + sum(_tokens(g)[0] for g in gs.values())
            action = JointAction(p, tuple(code[a] for a in roles.helpers), code[roles.main])
            items.append((p, i, code, action, share, tokens))
    return scorer.rows("discussion", items)
