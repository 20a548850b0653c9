"""The bridge between prompt-as-policy learning and GEPA's search engine (PyPI `gepa`).

GEPA (Agrawal et al., 2025) keeps the candidates, the per-task Pareto front over a validation set,
the minibatches and the acceptance test; what it optimises is a `dict[str, str]` of named texts.
Here a candidate's components are the team's agents and each text is that agent's learned
instructions, one per line (`encode` / `decode`). Three pieces plug our contracts into it:

- `TeamAdapter` (GEPA's `GEPAAdapter`): `evaluate` runs the prompted team on a batch of tasks
  through our `Env` and `Generator` (`samples` joint samples per task, a task's score is their mean
  total); `make_reflective_dataset` keeps the episodes for the reflector; `propose_new_texts` is our
  reflection (`prompt_reflect.propose`, written for small models that rarely keep a format), whose
  instruction per agent is appended to the parent's (at most `max_rules`, oldest dropped).
- `ExploreFront` (GEPA's `CandidateSelector`): the parent is the best mean on the Pareto tasks, or,
  with chance `explore`, a front member drawn as GEPA's own Pareto selector draws it.
- `RoundLog` (a GEPA callback): one row per round (parent, minibatch, parent and child means,
  accepted, the reflector's raw texts and the parsed instructions) and the progress callback.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gepa.core.adapter import EvaluationBatch
from gepa.gepa_utils import select_program_candidate_from_pareto_front

from orchestry.agents.base import Generator, SamplingSpec
from orchestry.algos.prompt_reflect import propose
from orchestry.envs.base import Env

Rules = dict[str, list[str]]


def encode(rules: Sequence[str]) -> str:
    """An agent's instructions as one component text, one per line (instructions hold no newline)."""
    return "\n".join(" ".join(r.split()) for r in rules)


def child_rules(parent: Rules, new: Mapping[str, str], max_rules: int) -> Rules:
    """The parent's rules with each agent's new instruction appended, the oldest dropped beyond
    `max_rules`; agents without a new one keep theirs."""
    out = {a: list(r) for a, r in parent.items()}
    for agent, rule in new.items():
        out[agent] = [*out.get(agent, []), rule][-max_rules:]
    return out


def decode(candidate: Mapping[str, str]) -> Rules:
    """A GEPA candidate's texts as rules: agent -> its instructions (agents with none left out)."""
    rules = {
        a: [line for line in text.splitlines() if line.strip()] for a, text in candidate.items()
    }
    return {a: r for a, r in rules.items() if r}


class TeamAdapter:
    """GEPA's adapter over a team (`Generator`) on an `Env`; it also counts the tokens spent.

    `run(rules, tasks)` returns the episodes of `samples` joint samples per task, task-major (the
    caller's `run_episodes` with `Prompted`); `state` collects tokens and the round rows."""

    def __init__(
        self,
        run: Callable[[Rules, Sequence[Any]], list[Any]],
        samples: int,
        reflector: Generator,
        env: Env,
        max_rules: int,
        reflect_sampling: SamplingSpec,
        log: RoundLog,
    ) -> None:
        self.run, self.samples, self.reflector = run, samples, reflector
        self.agents = list(env.roles.agents)
        self.max_rules, self.reflect_sampling, self.log = max_rules, reflect_sampling, log
        self.shown: list[Any] = []
        """The episodes of the latest reflective dataset: what the reflector reads next."""

    def evaluate(
        self, batch: list[Any], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch:
        episodes = self.run(decode(candidate), batch)
        self.log.team_tokens += sum(e.new_tokens for e in episodes)
        n = self.samples
        groups = [episodes[k * n : (k + 1) * n] for k in range(len(batch))]
        scores = [sum(e.outcome.total for e in g) / len(g) for g in groups]
        return EvaluationBatch(
            outputs=[None] * len(batch),
            scores=scores,
            trajectories=groups if capture_traces else None,
        )

    def make_reflective_dataset(
        self,
        candidate: dict[str, str],
        eval_batch: EvaluationBatch,
        components_to_update: list[str],
    ) -> dict[str, list[dict[str, Any]]]:
        self.shown = [e for group in eval_batch.trajectories or [] for e in group]
        self.log.parent_mean = sum(e.outcome.total for e in self.shown) / max(1, len(self.shown))
        return {
            a: [
                {
                    "Inputs": str(getattr(e.task, "id", "")),
                    "Generated Outputs": e.texts.get(a, ""),
                    "Feedback": e.outcome.notes,
                    "score": e.outcome.total,
                }
                for e in self.shown
            ]
            for a in components_to_update
        }

    def propose_new_texts(
        self,
        candidate: dict[str, str],
        reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
        components_to_update: list[str],
    ) -> dict[str, str]:
        rules = decode(candidate)
        proposed, texts, tokens = propose(
            self.reflector, self.shown, self.agents, rules, self.reflect_sampling
        )
        self.log.reflector_tokens += tokens
        self.log.proposed(texts, proposed)
        new = child_rules(rules, proposed, self.max_rules)
        return {a: encode(new[a]) for a in proposed if a in components_to_update}


class ExploreFront:
    """GEPA's `CandidateSelector`: the best mean on the Pareto tasks (the earliest on a tie) or,
    with chance `explore`, a front member drawn by GEPA's Pareto selector (weighted by the tasks
    it leads)."""

    def __init__(self, explore: float, rng: random.Random) -> None:
        self.explore, self.rng = explore, rng
        self.explored = False
        """Whether the latest choice explored."""

    def select_candidate_idx(self, state: Any) -> int:
        scores = state.program_full_scores_val_set
        self.explored = self.rng.random() < self.explore
        if self.explored:
            return select_program_candidate_from_pareto_front(
                state.get_pareto_front_mapping(), state.per_program_tracked_scores, self.rng
            )
        return max(range(len(scores)), key=lambda i: (scores[i], -i))


class RoundLog:
    """A GEPA callback writing one row per round, and the token counts; `progress(done, total)`
    after each round."""

    def __init__(
        self,
        task_ids: Sequence[str],
        rounds: int,
        selector: ExploreFront,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.task_ids, self.total, self.selector, self.progress = (
            task_ids,
            rounds,
            selector,
            progress,
        )
        self.rows: list[dict[str, Any]] = []
        self.made_in: dict[int, int] = {0: 0}
        """Candidate index -> the round that made it."""
        self.team_tokens = self.reflector_tokens = 0
        self.parent_mean = 0.0
        self._row: dict[str, Any] = {}

    def on_candidate_selected(self, event: Mapping[str, Any]) -> None:
        self._row = {
            "round": event["iteration"],
            "parent": event["candidate_idx"],
            "explore": self.selector.explored,
            "minibatch": [],
            "parent_mean": None,
            "child_mean": None,
            "accepted": False,
            "proposals": [],
            "parsed": {},
        }

    def on_minibatch_sampled(self, event: Mapping[str, Any]) -> None:
        self._row["minibatch"] = [self.task_ids[i] for i in event["minibatch_ids"]]

    def proposed(self, texts: list[str], parsed: Mapping[str, str]) -> None:
        self._row.update(parent_mean=self.parent_mean, proposals=texts, parsed=dict(parsed))

    def on_evaluation_end(self, event: Mapping[str, Any]) -> None:
        if event["candidate_idx"] is None and self._row:  # the child on the parent's minibatch
            scores = list(event["scores"])
            self._row["child_mean"] = sum(scores) / len(scores)

    def on_candidate_accepted(self, event: Mapping[str, Any]) -> None:
        self._row["accepted"] = True
        self.made_in[event["new_candidate_idx"]] = event["iteration"]

    def on_iteration_end(self, event: Mapping[str, Any]) -> None:
        if self._row:
            self.rows.append(self._row)
        self._row = {}
        if self.progress is not None:
            self.progress(len(self.rows), self.total)
