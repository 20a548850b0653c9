"""The evaluation protocols: how a method turns problems into programs, n samples per problem.

- `team`          the agents answer their own prompts independently (aligned joint actions). With the
                  untrained base this is the paper's *naive concatenation* baseline; with the MAGRPO
                  adapters it is the trained team.
- `single`        one model writes the whole entry point (it may define its own helpers).
                  With the adapter `train_single` trained, it is the single agent (GRPO).
- `sequential`    helpers answer first; the main agent sees their code in its prompt.
- `discussion`    one round of discussion: each agent sees its teammates' first answers and revises.

Every protocol drives an `Env` (its observations, actions and scores; the code env adds the baselines'
views `solo_observe`/`solo_act`, `observe_after_helpers`, `teammates_feedback`) and returns one row per
sample (see `score_rows`) for `metrics.compute_metrics`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from orchestry.agents.base import Generation, Generator, GenRequest, SamplingSpec
from orchestry.envs.base import BaselineEnv, Turn, acts_in_order
from orchestry.joint.turn import Ask, aligned, answer_turn

log = logging.getLogger("orchestry.eval.protocols")

Item = tuple[Any, int, dict[str, str], dict[str, str], float, int]
"""(task, sample index, code shown in the row, joint action, seconds, new tokens) of one sample."""


def score_rows(env: BaselineEnv, method: str, items: Sequence[Item]) -> list[dict[str, Any]]:
    """Score every sample's joint action in one batch and turn each into a row record."""
    start = time.perf_counter()
    outcomes = env.score([(it[0], it[3]) for it in items])
    log.info(
        "scored %d joint actions in %.1f s",
        len(items),
        time.perf_counter() - start,
    )
    return [
        {
            "method": method,
            "problem_id": task.id,
            "sample": idx,
            "code": code,
            "seconds": seconds,
            "new_tokens": tokens,
            **outcome.record,
        }
        for (task, idx, code, _, seconds, tokens), outcome in zip(items, outcomes, strict=True)
    ]


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
    env: BaselineEnv,
    tasks: Sequence[Any],
    n: int,
    sampling: SamplingSpec,
    method: str,
) -> list[dict[str, Any]]:
    """Every agent answers its own prompt; the i-th samples form joint sample i. In a sequential
    environment the agents answer in role order, each seeing the earlier ones' sample i
    (`joint.turn.answer_turn`: one generate call, or one per agent)."""
    agents = env.roles.agents
    leaves = aligned(n, len(agents))
    turn = answer_turn(gen, env, [Ask(t, {a: () for a in agents}, leaves) for t in tasks], sampling)
    for call in turn.calls:
        log.info(
            "generated %d completions (%d prompts, %d tokens) in %.1f s",
            sum(r.n for r in call.requests),
            len(call.requests),
            sum(g.new_tokens for g in call.generations),
            call.seconds,
        )
    share = turn.seconds / (len(tasks) * n)  # amortised generation seconds per joint sample
    items: list[Item] = []
    for t, joint in zip(tasks, turn.joint, strict=True):
        for i, leaf in enumerate(leaves):
            code = {a: x.action for a, x in joint[leaf].items()}
            tokens = sum(  # every segment's tokens when an agent called tools
                _tokens(y.generation)[y.k]
                for x in joint[leaf].values()
                for y in (x, *(x.steps or ()))
            )
            items.append((t, i, code, code, share, tokens))
    rows = score_rows(env, method, items)
    # with tools on, each agent's calls and results (without tools the rows are as they were)
    calls = [
        {a: x.tool_record() for a, x in joint[leaf].items()}
        for joint in turn.joint
        for leaf in leaves
    ]
    return [
        row if all(v is None for v in c.values()) else {**row, "tools": c}
        for row, c in zip(rows, calls, strict=True)
    ]


def single(
    gen: Generator,
    env: BaselineEnv,
    tasks: Sequence[Any],
    agent: str,
    n: int,
    sampling: SamplingSpec,
    method: str = "single",
) -> list[dict[str, Any]]:
    """One model writes the whole entry point (`method`: the rows' method name, e.g. `single_grpo`
    for the single agent trained by GRPO)."""
    requests = [GenRequest(agent, env.solo_observe(t), n) for t in tasks]
    gens, wall = timed_generate(gen, requests, sampling)
    share = wall / (len(tasks) * n)
    items: list[Item] = []
    for t, g in zip(tasks, gens, strict=True):
        tokens = _tokens(g)
        for i, text in enumerate(g.texts):
            joint = env.solo_act(t, text)
            items.append((t, i, {agent: joint[env.roles.main]}, joint, share, tokens[i]))
    return score_rows(env, method, items)


def sequential(
    gen: Generator,
    env: BaselineEnv,
    tasks: Sequence[Any],
    n: int,
    sampling: SamplingSpec,
) -> list[dict[str, Any]]:
    """Helpers answer first; the main agent sees their code. A sequential environment's team
    already acts in role order, each agent seeing the earlier ones: this baseline is then that."""
    if acts_in_order(env):
        return team(gen, env, tasks, n, sampling, "sequential")
    roles = env.roles
    h = len(roles.helpers)
    helper_reqs = [GenRequest(a, env.observe(t, a), n) for t in tasks for a in roles.helpers]
    helper_gens, wall1 = timed_generate(gen, helper_reqs, sampling)
    main_reqs, helper_code = [], []
    for ti, t in enumerate(tasks):
        for i in range(n):
            code = {
                a: env.act(t, a, helper_gens[ti * h + ai].texts[i])
                for ai, a in enumerate(roles.helpers)
            }
            helper_code.append(code)
            main_reqs.append(GenRequest(roles.main, env.observe_after_helpers(t, code), 1))
    main_gens, wall2 = timed_generate(gen, main_reqs, sampling)
    share = (wall1 + wall2) / (len(tasks) * n)
    items: list[Item] = []
    for ti, t in enumerate(tasks):
        for i in range(n):
            k = ti * n + i
            mg = main_gens[k]
            code = {**helper_code[k], roles.main: env.act(t, roles.main, mg.texts[0])}
            tokens = _tokens(mg)[0] + sum(_tokens(helper_gens[ti * h + ai])[i] for ai in range(h))
            items.append((t, i, code, code, share, tokens))
    return score_rows(env, "sequential", items)


def discussion(
    gen: Generator,
    env: BaselineEnv,
    tasks: Sequence[Any],
    n: int,
    sampling: SamplingSpec,
) -> list[dict[str, Any]]:
    """One round of discussion: each agent sees its teammates' first answers and revises."""
    agents = env.roles.agents
    first_reqs = [GenRequest(a, env.observe(t, a), n) for t in tasks for a in agents]
    first, wall1 = timed_generate(gen, first_reqs, sampling)
    second_reqs, first_tokens = [], []
    for ti, t in enumerate(tasks):
        per = {a: first[ti * len(agents) + ai] for ai, a in enumerate(agents)}
        for i in range(n):
            codes = {a: env.act(t, a, per[a].texts[i]) for a in agents}
            first_tokens.append(sum(_tokens(g)[i] for g in per.values()))
            for a in agents:
                turn = Turn(per[a].texts[i], env.teammates_feedback(codes, a))
                second_reqs.append(GenRequest(a, env.observe(t, a, [turn]), 1))
    second, wall2 = timed_generate(gen, second_reqs, sampling)
    share = (wall1 + wall2) / (len(tasks) * n)
    items: list[Item] = []
    for ti, t in enumerate(tasks):
        for i in range(n):
            k = ti * n + i
            gs = {a: second[k * len(agents) + ai] for ai, a in enumerate(agents)}
            code = {a: env.act(t, a, g.texts[0]) for a, g in gs.items()}
            tokens = first_tokens[k] + sum(_tokens(g)[0] for g in gs.values())
            items.append((t, i, code, code, share, tokens))
    return score_rows(env, "discussion", items)
