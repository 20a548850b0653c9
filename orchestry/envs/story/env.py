"""The story task as an `Env`: each role writes its part of a short story at once; the parts,
joined in role order, are the team's story.

Observations are the prompts of `prompts.py` (a role's duty from `data/story/roles.yaml`), actions
a completion's prose (`prose.clean_part`), scores the weighted quality (judge.py, or a judge
callable such as Claude), collaboration and efficiency of `reward.py`, feedback the whole story
with its score in words. There is no reference story, so `reference` is None. The baselines' views
(one storyteller alone, the earlier parts shown) are here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from orchestry.envs.base import Messages, Outcome, Roles, Turn, with_history
from orchestry.envs.story import prompts, prose
from orchestry.envs.story.judge import judge_quality
from orchestry.envs.story.reward import StorySettings, collaboration, efficiency
from orchestry.envs.story.tasks import StoryTask

MAX_NOTES = 5
"""Issues named in the notes (the feedback a small model reads); the record keeps them all."""
StoryJudge = Callable[[StoryTask, str], float | None]
"""(task, story text) -> quality in [0, 1], or None when it has no verdict (the API call failed or
the reply was off-schema): the offline judge's score is used for that story."""


class StoryEnv:
    """Cooperative short-story writing: one part per role, rewarded for quality, collaboration and
    efficiency."""

    sequential = False  # the agents answer a turn at once, each on its own observation

    def __init__(
        self,
        roles: Roles,
        settings: StorySettings,
        duties: Mapping[str, str],
        *,
        judge: StoryJudge | None,
    ) -> None:
        """`duties`: role name -> duty (`tasks.load_roles()`); every agent needs one.
        `judge` None: the offline judge alone."""
        unknown = [a for a in roles.agents if a not in duties]
        if unknown:
            raise ValueError(
                f"story roles {unknown} have no duty in roles.yaml; the known roles are "
                f"{', '.join(duties)} (model.agents names the team's roles)"
            )
        self.roles, self.settings, self.judge = roles, settings, judge
        self.duties = {a: duties[a] for a in roles.agents}

    # ------------------------------------------------------------------ the contract
    def observe(self, task: StoryTask, agent: str, history: Sequence[Turn] = ()) -> Messages:
        return with_history(
            prompts.role_messages(task, self.roles.agents, agent, self.duties), history
        )

    def act(self, task: StoryTask, agent: str, text: str) -> str:
        return prose.clean_part(text, self.roles.agents)

    def reference(self, task: StoryTask, agent: str) -> str | None:
        """None: the story task has no reference story."""
        return None

    def score(self, batch: Sequence[tuple[StoryTask, Mapping[str, str]]]) -> list[Outcome]:
        return [self._outcome(task, actions) for task, actions in batch]

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        parts = list(outcome.record["parts"].items())
        return prompts.feedback_message(
            agent, parts, outcome.record["reward"], outcome.notes, advice
        )

    # ------------------------------------------------------------------ the baselines' views
    def solo_observe(self, task: StoryTask) -> Messages:
        """One model alone writes the whole story (the single-model baseline)."""
        return prompts.solo_messages(task, len(self.roles.agents))

    def solo_act(self, task: StoryTask, text: str) -> dict[str, str]:
        """A lone story as the team's joint action: cut into one contiguous part per role, by
        paragraphs (or by sentences when there are fewer paragraphs than roles). The parts joined
        give back the cleaned story: exactly when cut by paragraphs, up to white space otherwise."""
        story = prose.clean_part(text, self.roles.agents)
        n = len(self.roles.agents)
        paragraphs = prose.paragraphs(story)
        if len(paragraphs) >= n:
            units, sep = paragraphs, prose.PARAGRAPH_BREAK
        else:
            units, sep = prose.sentences(story), " "
        size, extra = divmod(len(units), n)
        parts, start = {}, 0
        for i, agent in enumerate(self.roles.agents):
            end = start + size + (i < extra)
            parts[agent] = sep.join(units[start:end])
            start = end
        return parts

    def observe_after_helpers(self, task: StoryTask, helper_actions: Mapping[str, str]) -> Messages:
        """The last role's first observation with the earlier roles' parts shown (sequential)."""
        shown = [(a, helper_actions.get(a, "")) for a in self.roles.helpers]
        return prompts.with_teammates_parts(self.observe(task, self.roles.main), shown)

    def teammates_feedback(self, actions: Mapping[str, str], agent: str) -> str:
        """The discussion round's message: the other roles' parts, and a request to revise."""
        others = [(a, actions[a]) for a in self.roles.agents if a != agent and a in actions]
        return prompts.teammates_message(others)

    # ------------------------------------------------------------------ scoring details
    def _outcome(self, task: StoryTask, actions: Mapping[str, str]) -> Outcome:
        missing = [a for a in self.roles.agents if a not in actions]
        if missing:
            raise ValueError(f"story {task.id}: the joint action has no part for {missing}")
        parts = [(a, actions[a].strip()) for a in self.roles.agents]
        story = prose.PARAGRAPH_BREAK.join(p for _, p in parts if p)
        report = judge_quality(task, story, self.settings.words_range)
        quality, judged_by = report.score, "offline"
        if self.judge is not None and story:
            verdict = self.judge(task, story)
            if verdict is not None:
                if not (math.isfinite(verdict) and 0.0 <= verdict <= 1.0):
                    raise ValueError(
                        f"story {task.id}: the judge's score {verdict} is not in [0, 1]"
                    )
                quality, judged_by = float(verdict), "claude"
        collab, collab_issues = collaboration(task, parts)
        eff, n_paragraphs, eff_issues = efficiency(parts, self.settings.turns_range)
        total = self.settings.total(quality, collab, eff)
        n_words = len(prose.words(story))
        issues = [*eff_issues, *collab_issues, *report.issues]
        reward = {"total": total, "quality": quality, "collaboration": collab, "efficiency": eff}
        metrics = {f"reward/{k}": v for k, v in reward.items()}
        metrics.update({f"quality/{k}": v for k, v in report.checks().items()})
        metrics.update(words=float(n_words), paragraphs=float(n_paragraphs))
        record = {
            "reward": reward,
            "text": story,
            "judge": judged_by,
            "parts": dict(parts),
            "offline_quality": report.score,
            "quality_checks": report.checks(),
            "words": n_words,
            "paragraphs": n_paragraphs,
            "issues": issues,
        }
        summary = f"{n_paragraphs} paragraphs, {n_words} words."
        shown = "; ".join(issues[:MAX_NOTES]) + "." if issues else "no problems found."
        shown = shown[0].upper() + shown[1:]
        notes = f"{summary} {shown}"
        return Outcome(total, metrics, record, notes)
