"""The code-review workflow as an `Env`: a writer drafts the function, a reviewer comments on the
draft, a refactorer returns the final code; the problem's tests, run in the sandbox, judge both.

The tasks are the code task's `Problem`s (data/coop, data/coop3, HumanEval): the function to write
is the entry point, with any helpers the writer wants. The agents act in role order within a turn
(`sequential`): the reviewer sees the draft, the refactorer the draft and the review. Scores come
from `reward.py`: the final code's tests and syntax, and the review judged by what the refactor
fixed; the draft and the final code of every joint action of a batch run in one `run_many` call.
Observations and feedback are the texts of `prompts.py`; the baselines' views are here too.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

from orchestry.envs.base import Messages, Outcome, Roles, Turn, with_history
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.sandbox import SandboxJob, SandboxLimits, TestReport, run_many
from orchestry.envs.code_review import prompts
from orchestry.envs.code_review.extract import clean_review, function_code, word_count
from orchestry.envs.code_review.prompts import REFACTORER, REVIEWER, WRITER
from orchestry.envs.code_review.reward import (
    CodeReviewSettings,
    ReviewReward,
    defines_entry_point,
    review_reward,
)


class CodeReviewEnv:
    """Writer -> reviewer -> refactorer on a code problem, rewarded by sandboxed tests."""

    sequential = True

    def __init__(
        self, roles: Roles, settings: CodeReviewSettings, limits: SandboxLimits, workers: int
    ) -> None:
        """`roles`: three agents, by position the writer, the reviewer and the refactorer."""
        if len(roles.agents) != 3:
            raise ValueError(
                f"the code_review task has three roles (writer, reviewer, refactorer, in that "
                f"order); got {len(roles.agents)} agents {list(roles.agents)}"
            )
        if workers < 1:
            raise ValueError(f"code_review: workers must be at least 1, got {workers}")
        self.roles, self.settings, self.limits, self.workers = roles, settings, limits, workers
        self.writer, self.reviewer, self.refactorer = roles.agents

    def _position(self, agent: str) -> int:
        if agent not in self.roles.agents:
            raise ValueError(
                f"unknown agent {agent!r}; the code_review roles are {self.roles.agents}"
            )
        return self.roles.agents.index(agent)

    # ------------------------------------------------------------------ the contract
    def observe(self, task: Problem, agent: str, history: Sequence[Turn] = ()) -> Messages:
        max_words = self.settings.review_max_words
        return with_history(prompts.first_messages(task, self._position(agent), max_words), history)

    def observe_after(
        self,
        task: Problem,
        agent: str,
        earlier: Mapping[str, str],
        history: Sequence[Turn] = (),
    ) -> Messages:
        """The observation with this turn's earlier actions shown at its end: the draft for the
        reviewer, the draft and the review for the refactorer (the writer goes first: none)."""
        position = self._position(agent)
        messages = self.observe(task, agent, history)
        if position == WRITER:
            return messages
        draft = earlier.get(self.writer, "")
        review = earlier.get(self.reviewer) if position == REFACTORER else None
        return prompts.with_note(messages, prompts.earlier_note(position, draft, review))

    def act(self, task: Problem, agent: str, text: str) -> str:
        if self._position(agent) == REVIEWER:
            return clean_review(text, self.settings.review_max_words)
        return function_code(text, task)

    def reference(self, task: Problem, agent: str) -> str | None:
        """Writer and refactorer: the reference solution of the entry point, with the helper
        references when it calls a helper (None without a reference). Reviewer: None."""
        if self._position(agent) == REVIEWER or not task.main.reference.strip():
            return None
        names = {n.id for n in ast.walk(ast.parse(task.main.reference)) if isinstance(n, ast.Name)}
        if any(h.name in names and h.reference.strip() for h in task.helpers):
            return task.reference_program()
        return task.main.reference

    def score(self, batch: Sequence[tuple[Problem, Mapping[str, str]]]) -> list[Outcome]:
        plans = [self._plan(task, actions) for task, actions in batch]
        # Both programs of every joint action in one parallel batch; the same program for the
        # same problem runs once (the draft standing as final, equal drafts in a group).
        jobs = list(dict.fromkeys(job for plan in plans for job in plan[1:] if job is not None))
        reports = dict(zip(jobs, run_many(jobs, self.limits, self.workers), strict=True))
        return [
            self._outcome(
                task,
                actions,
                final_from,
                reports[draft_job] if draft_job else None,
                reports[final_job] if final_job else None,
            )
            for (task, actions), (final_from, draft_job, final_job) in zip(
                batch, plans, strict=True
            )
        ]

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        return prompts.feedback_message(
            self._position(agent),
            outcome.notes,
            outcome.record["review"],
            advice,
            self.settings.review_max_words,
        )

    # ------------------------------------------------------------------ the baselines' views
    def solo_observe(self, task: Problem) -> Messages:
        """One model alone writes the function (the single-model baseline)."""
        return prompts.solo_messages(task)

    def solo_act(self, task: Problem, text: str) -> dict[str, str]:
        """A lone model's code as the writer's draft, with no review and no refactor: it stands."""
        return {self.writer: function_code(text, task), self.reviewer: "", self.refactorer: ""}

    def observe_after_helpers(self, task: Problem, helper_actions: Mapping[str, str]) -> Messages:
        """The refactorer's first observation with the draft and the review shown."""
        return self.observe_after(task, self.refactorer, helper_actions)

    def teammates_feedback(self, actions: Mapping[str, str], agent: str) -> str:
        """The discussion round's message: the other roles' answers, and a request to revise."""
        others = [(i, actions.get(a, "")) for i, a in enumerate(self.roles.agents) if a != agent]
        return prompts.teammates_message(
            others, self._position(agent), self.settings.review_max_words
        )

    # ------------------------------------------------------------------ scoring details
    def _job(self, task: Problem, code: str) -> SandboxJob | None:
        """The sandbox job testing `code`, or None when it defines no entry point to test."""
        if not defines_entry_point(code, task.main.name):
            return None
        return SandboxJob(
            program=code.strip() + "\n",
            tests=tuple(task.tests),
            setup=task.setup,
            entry_point=task.main.name,
        )

    def _plan(
        self, task: Problem, actions: Mapping[str, str]
    ) -> tuple[str, SandboxJob | None, SandboxJob | None]:
        """(where the final code comes from, the draft's job, the final code's job)."""
        missing = [a for a in self.roles.agents if a not in actions]
        if missing:
            raise ValueError(f"problem {task.id}: the joint action has no action for {missing}")
        draft_job = self._job(task, actions[self.writer])
        final_job = self._job(task, actions[self.refactorer])
        if final_job is None:
            return "writer", draft_job, draft_job
        return "refactorer", draft_job, final_job

    def _outcome(
        self,
        task: Problem,
        actions: Mapping[str, str],
        final_from: str,
        draft_report: TestReport | None,
        final_report: TestReport | None,
    ) -> Outcome:
        draft, review = actions[self.writer], actions[self.reviewer]
        from_refactorer = final_from == "refactorer"
        final = actions[self.refactorer] if from_refactorer else draft
        n = len(task.tests)
        reward = review_reward(
            _passed(draft_report, n),
            _passed(final_report, n),
            final_report is not None,
            review,
            self.settings,
        )
        metrics = {
            **{f"reward/{k}": v for k, v in reward.parts().items()},
            "draft_pass_rate": reward.draft_pass_rate,
            "final_pass_rate": reward.final_pass_rate,
            "improved_rate": float(reward.improved),
            "final_from_refactorer_rate": float(from_refactorer),
            "review_words": float(word_count(review)),
        }
        names = self.roles.agents
        record = {
            "reward": reward.parts(),
            "text": prompts.episode_text(names, draft, review, final, final_from),
            "main_name": task.main.name,
            "draft": draft,
            "review": review,
            "final": final,
            "final_from": final_from,
            "draft_pass_rate": reward.draft_pass_rate,
            "final_pass_rate": reward.final_pass_rate,
            "improved": reward.improved,
            "n_tests": n,
            "fixed": reward.fixed,
            "broken": reward.broken,
            "review_words": word_count(review),
            "first_failure": _first_failure(final_report, task.main.name),
            "draft_first_failure": _first_failure(draft_report, task.main.name),
        }
        notes = self._notes(task, draft_report, final_report, final_from, reward, review)
        return Outcome(reward.total, metrics, record, notes, detail=(draft_report, final_report))

    def _notes(
        self,
        task: Problem,
        draft_report: TestReport | None,
        final_report: TestReport | None,
        final_from: str,
        reward: ReviewReward,
        review: str,
    ) -> str:
        """What went right and wrong, in words (the base of the feedback)."""
        name, n = task.main.name, len(task.tests)
        lines = [f"Draft ({self.writer}): {_result_words(draft_report, name, n)}"]
        lines.append(
            f"Review ({self.reviewer}): {word_count(review)} words."
            if review.strip()
            else f"Review ({self.reviewer}): empty."
        )
        if final_from == "refactorer":
            lines.append(f"Final ({self.refactorer}): {_result_words(final_report, name, n)}")
        else:
            lines.append(
                f"Final: the refactorer ({self.refactorer}) gave no working `{name}`, so the "
                "draft stands as the final code."
            )
        failing = reward.fixed + reward.still_failing
        if failing == 0:
            verdict = "still passes" if reward.final_pass_rate == 1.0 else "no longer passes"
            lines.append(f"The draft passed every test; the final code {verdict} them all.")
        else:
            broke = f"broke {reward.broken}" if reward.broken else "broke none"
            lines.append(
                f"The final code fixed {reward.fixed} of the draft's {failing} failing tests "
                f"and {broke} of its passing ones."
            )
        return "\n".join(lines)


def _passed(report: TestReport | None, n_tests: int) -> tuple[bool, ...]:
    """Per-test results; a program that did not run (no entry point) fails every test."""
    return tuple(report.passed) if report is not None else (False,) * n_tests


def _first_failure(report: TestReport | None, name: str) -> str | None:
    if report is None:
        return f"no function `{name}` was defined"
    return report.syntax_error or report.load_error or report.first_failure


def _result_words(report: TestReport | None, name: str, n_tests: int) -> str:
    """A program's test results in words: passed count, and the first failure."""
    if report is None:
        return f"no function `{name}` was defined, so no test ran (0/{n_tests} passed)."
    text = f"{report.n_passed}/{len(report.passed)} tests passed."
    if report.syntax_error:
        text += f" Syntax error: {report.syntax_error}."
    elif report.load_error:
        text += f" Error while loading: {report.load_error}."
    if report.timed_out:
        text += " It timed out."
    if report.first_failure:
        text += f" First failure: {report.first_failure}"
    return text
