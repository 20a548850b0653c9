"""Stage `beam`: beam search over joint multi-turn trajectories on the test split, and best-of-M.

For each test task, `beam.searches` independent searches (algos/beam.py): every agent samples k
answers per kept trajectory and turn, the joint candidates are scored by the environment's own
reward (the code task runs the tests in the sandbox), the `width` best are kept and revised with the
environment's feedback. Best-of-M then draws, per task and search, as many independent joint samples
as the beam generated completions per agent (the same token budget up to prompt length) and keeps the
best by the same reward. Both pick with the environment's reward, i.e. a verifier that sees the tests:
they compare with each other, not with the other methods' pass@1 (results.md says so). With
`beam.judge_weight` > 0 both also rank by Claude's judge of the joint answer (reward + weight x
score); the rows keep the reward, and the judge's dollars count in the cost file.
"""

from __future__ import annotations

import logging
import math

from orchestry import io, paths
from orchestry.algos.beam import BeamSettings, beam_search, best_of, search_rows
from orchestry.envs.base import Env
from orchestry.eval.records import write_method
from orchestry.params import Params
from orchestry.stages.from_params import (
    beam_judge,
    make_env,
    make_generator,
    read_tasks,
    sampling_spec,
    seed_everything,
    spent_usd,
)

log = logging.getLogger("orchestry.stages.beam")


def settings(params: Params, search: int) -> BeamSettings:
    b = params.beam
    return BeamSettings(
        width=b.width,
        k=b.k,
        turns=b.turns,
        success=b.success,
        max_joint=b.max_joint,
        seed=params.seed + search,
        judge_weight=b.judge_weight,
    )


def search_env(params: Params) -> Env:
    """The environment, with `beam.feedback` for the later turns (the evaluation stages' code
    environment is single-turn and gives none)."""
    train = params.train.model_copy(update={"feedback": params.beam.feedback})
    return make_env(params.model_copy(update={"train": train}))


def run(params: Params) -> None:
    tasks = read_tasks(params, "test")
    if not tasks:
        raise FileNotFoundError("the test split is empty; give prepare.sets some n_test")
    seed_everything(params.seed)
    env = search_env(params)
    gen = make_generator(params, list(env.roles.agents), paths.BEAM)
    judge = beam_judge(params, env, gen, paths.BEAM)
    sampling, agents = sampling_spec(params), len(env.roles.agents)
    beam_rows, best_rows = [], []
    for i in range(params.beam.searches):
        s = settings(params, i)
        log.info(
            "search %d/%d: beam width %d, k %d, %d turns on %d tasks",
            i + 1,
            params.beam.searches,
            s.width,
            s.k,
            s.turns,
            len(tasks),
        )
        found = beam_search(gen, env, tasks, s, sampling, judge)
        budgets = [math.ceil(f.completions / agents) for f in found]
        drawn = best_of(gen, env, tasks, budgets, sampling, s.seed, judge, s.judge_weight)
        beam_rows += search_rows("beam", found, i)
        best_rows += search_rows("best_of", drawn, i)
    e = params.evaluate
    write_method("beam", beam_rows, e.ks, e.bootstrap, params.seed)
    write_method("best_of", best_rows, e.ks, e.bootstrap, params.seed)
    io.write_json(
        paths.BEAM_COST,
        {
            "beam_tokens": sum(r["new_tokens"] for r in beam_rows),
            "best_of_tokens": sum(r["new_tokens"] for r in best_rows),
            "usd": spent_usd(gen, judge),
        },
    )
