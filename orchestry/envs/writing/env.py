"""The paper's writing task as an `Env`: two agents write the two parts, the level reward judges.

Agent 1 (the first role) writes part 1: a concise summary of a post (TL;DR) or the background and
motivation paragraph of an introduction (arXiv); agent 2 writes part 2: a detailed summary, or the
method and contributions paragraph. Observations are the prompts of `prompts.py`, actions the text
`extract.py` cleans of chat boilerplate, scores the reward of `reward.py`, feedback both parts with
the reward in words. The baselines' views (one model writes both parts; part 1 shown to agent 2;
the other part shown in a discussion round) are here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestry.envs.base import Messages, Outcome, Roles, Turn, with_history
from orchestry.envs.writing import prompts
from orchestry.envs.writing.extract import clean_text, split_solo
from orchestry.envs.writing.reward import WritingReward, WritingSettings, level_reward, reward_notes
from orchestry.envs.writing.tasks import WritingTask


class WritingEnv:
    """Two-part cooperative writing (MAGRPO's TL;DR and arXiv expansion tasks)."""

    sequential = False  # the agents answer a turn at once, each on its own observation

    def __init__(self, roles: Roles, settings: WritingSettings) -> None:
        if len(roles.agents) != 2:
            raise ValueError(
                f"the writing task has two parts, one per agent; got {len(roles.agents)} agents "
                f"{list(roles.agents)}"
            )
        self.roles, self.settings = roles, settings

    def _position(self, agent: str) -> int:
        if agent not in self.roles.agents:
            raise ValueError(f"unknown agent {agent!r}; the writing roles are {self.roles.agents}")
        return self.roles.agents.index(agent)

    # ------------------------------------------------------------------ the contract
    def observe(self, task: WritingTask, agent: str, history: Sequence[Turn] = ()) -> Messages:
        return with_history(
            prompts.initial_messages(task, self._position(agent), self.settings.length_scale),
            history,
        )

    def act(self, task: WritingTask, agent: str, text: str) -> str:
        return clean_text(text)

    def reference(self, task: WritingTask, agent: str) -> str | None:
        """None: the corpus has no reference texts."""
        return None

    def score(self, batch: Sequence[tuple[WritingTask, Mapping[str, str]]]) -> list[Outcome]:
        return [self._outcome(task, actions) for task, actions in batch]

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        record = outcome.record
        parts = {i: record["parts"][a] for i, a in enumerate(self.roles.agents)}
        score = (outcome.total, self.settings.max_total)
        return prompts.feedback_message(
            record["kind"], parts, outcome.notes, score, self._position(agent), advice
        )

    # ------------------------------------------------------------------ the baselines' views
    def solo_observe(self, task: WritingTask) -> Messages:
        """One model alone writes both parts as two paragraphs (the single-model baseline)."""
        return prompts.solo_messages(task, self.settings.length_scale)

    def solo_act(self, task: WritingTask, text: str) -> dict[str, str]:
        """A lone model's text as the team's joint action: its two parts, one per role."""
        return dict(zip(self.roles.agents, split_solo(text), strict=True))

    def observe_after_helpers(
        self, task: WritingTask, helper_actions: Mapping[str, str]
    ) -> Messages:
        """Agent 2's first observation with part 1 shown (the sequential pipeline)."""
        messages = self.observe(task, self.roles.main)
        note = prompts.first_part_note(task.kind, helper_actions[self.roles.helpers[0]])
        last = messages[-1]
        return [*messages[:-1], {"role": last["role"], "content": f"{last['content']}\n\n{note}"}]

    def teammates_feedback(self, actions: Mapping[str, str], agent: str) -> str:
        """The discussion round's message: the other part, and a request to revise."""
        position = self._position(agent)
        return prompts.teammate_note(actions[self.roles.agents[1 - position]], position)

    # ------------------------------------------------------------------ scoring details
    def _outcome(self, task: WritingTask, actions: Mapping[str, str]) -> Outcome:
        first, second = (actions[a] for a in self.roles.agents)
        reward = level_reward(task.kind, task.source, first, second, self.settings)
        return Outcome(
            reward.total,
            _metrics(reward),
            {
                "task_id": task.id,
                "kind": task.kind,
                "text": f"{first}\n\n{second}".strip(),
                "parts": dict(zip(self.roles.agents, (first, second), strict=True)),
                "reward": reward.to_dict(),
                "words": list(reward.words),
                "length_ratio": reward.length_ratio,
                "unique_ratio": reward.unique_ratio,
                "jaccard": reward.jaccard,
                "transitions": list(reward.transitions),
                "source_overlap": reward.source_overlap,
                "gate": reward.gate,
            },
            reward_notes(task.kind, reward, self.settings),
            detail=reward,
        )


def _metrics(reward: WritingReward) -> dict[str, float]:
    return {
        "reward/total": reward.total,
        **{f"reward/{name}": value for name, value in reward.parts().items()},
        "length_ratio": reward.length_ratio,
        "unique_ratio": reward.unique_ratio,
        "jaccard": reward.jaccard,
        "transition_categories": float(len(reward.transitions)),
        "source_overlap": reward.source_overlap,
        "words_part1": float(reward.words[0]),
        "words_part2": float(reward.words[1]),
    }
