"""Stage `prompt_policy`: learn each agent's system prompt on the train split, then evaluate it.

The team's weights stay as they are (the local base model with untrained adapters, or Claude with
`evaluate.backend: claude`); what learns is the instructions added to each agent's system prompt
(algos/prompt_policy.py). The learned prompts and the library of behaviours are written first, read
back from those files, and the team with them answers the test split like every method
(`results/baselines/prompt_policy/`). Its starting prompts are the naive-concatenation baseline's.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from orchestry import io, paths
from orchestry.agents.base import SamplingSpec
from orchestry.algos.prompt_policy import (
    Candidate,
    PolicyState,
    Prompted,
    PromptPolicySettings,
    learn,
    load_rules,
    save,
)
from orchestry.eval.protocols import team
from orchestry.eval.records import write_method
from orchestry.params import Params
from orchestry.stages.from_params import (
    make_env,
    make_generator,
    read_tasks,
    sampling_spec,
    seed_everything,
    spent_usd,
)

log = logging.getLogger("orchestry.stages.prompt_policy")
METHOD = "prompt_policy"


def settings(params: Params) -> PromptPolicySettings:
    s = params.prompt_policy
    return PromptPolicySettings(
        rounds=s.rounds,
        minibatch=s.minibatch,
        samples=s.samples,
        pareto_tasks=s.pareto_tasks,
        explore=s.explore,
        max_rules=s.max_rules,
        seed=params.seed,
    )


def reflect_sampling(params: Params) -> SamplingSpec:
    """The team's sampling with the reflection's own token limit."""
    return dataclasses.replace(
        sampling_spec(params), max_new_tokens=params.prompt_policy.reflect_tokens
    )


def eta_log(what: str):
    """A progress callback that logs each finished round with the time left at the pace so far."""
    start = time.perf_counter()

    def progress(done: int, total: int) -> None:
        spent = time.perf_counter() - start
        left = spent / max(done, 1) * (total - done)
        log.info("%s %d/%d done after %.0f s, about %.0f s left", what, done, total, spent, left)

    return progress


def run(params: Params) -> None:
    train, test = read_tasks(params, "train"), read_tasks(params, "test")
    if not test:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    seed_everything(params.seed)
    env = make_env(params, training=False)
    out = paths.PROMPT_POLICY
    agents, kind = list(env.roles.agents), params.prompt_policy.reflector
    if kind == "local" and params.evaluate.backend == "local":  # one base model, one more adapter
        gen = reflector = make_generator(params, [*agents, "reflector"], out)
    else:
        gen = make_generator(params, agents, out)
        backend = params.evaluate.model_copy(update={"backend": kind})
        reflector = make_generator(
            params.model_copy(update={"evaluate": backend}), ["reflector"], out
        )
    s = settings(params)
    log.info(
        "prompt policy: %d rounds on %d train tasks (minibatch %d x %d samples), reflector %s",
        s.rounds,
        len(train),
        s.minibatch,
        s.samples,
        params.prompt_policy.reflector,
    )
    if train:
        state = learn(
            gen,
            reflector,
            env,
            train,
            s,
            sampling_spec(params),
            reflect_sampling(params),
            progress=eta_log("round"),
        )
    else:  # a team checked on problems kept apart (n_train 0): nothing to learn from
        log.warning("the train split is empty: no rounds, the starting prompts are evaluated")
        state = PolicyState(candidates=[Candidate(0, None, 0, {}, {})])
    save(state, paths.PROMPTS, paths.LIBRARY)
    rules = load_rules(paths.PROMPTS)  # evaluation reads what was saved, as a later run would
    log.info("learned rules: %s", {a: len(r) for a, r in rules.items()})
    e = params.evaluate
    rows = team(Prompted(gen, rules), env, test, e.n_samples, sampling_spec(params), METHOD)
    write_method(METHOD, rows, e.ks, e.bootstrap, params.seed)
    cost = {
        "learning_team_tokens": state.team_tokens,
        "learning_reflector_tokens": state.reflector_tokens,
        "test_tokens": sum(r["new_tokens"] for r in rows),
        "usd": spent_usd(gen, reflector),
    }
    io.write_json(paths.PROMPT_POLICY_COST, cost)
