"""The paper's code task as an `Env`: helpers write `aux`, main writes the entry point, tests judge.

Observations are the prompts of `prompts.py`, actions the code `extract.py` reads out of a completion,
scores the level reward of `reward.py` with the programs run in the sandbox, feedback the sandbox's
diagnostics in words. The baselines' extra views (one model alone, teammates' code shown) are here
too, so the protocols never build a code prompt themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestry.envs.base import Messages, Outcome, Roles, Turn, with_history
from orchestry.envs.code import prompts
from orchestry.envs.code.extract import agent_code, extract_code
from orchestry.envs.code.problems import Problem
from orchestry.envs.code.reward import (
    JointAction,
    RewardBreakdown,
    RewardWeights,
    plan_rewards,
)
from orchestry.envs.code.role_checks import RoleChecks, plan_role_checks
from orchestry.envs.code.sandbox import SandboxLimits, TestReport, run_many
from orchestry.envs.code.trivial_tests import robust_pass_rate, trivial_tests
from orchestry.envs.tools.registry import ToolUse

FEEDBACK_MODES = ("level_feedback", "plain", "expert_edits")
SINGLE_PROMPTS = ("plain", "helper_contract")
"""What one model alone is told (`env.single_prompt`): the entry point only, or also the helpers'
contract main is told (prompts.single_messages)."""


class CodeEnv:
    """Cooperative function writing (MAGRPO's aux/main task) with sandboxed tests."""

    sequential = False  # the agents answer a turn at once, each on its own observation

    def __init__(
        self,
        roles: Roles,
        weights: RewardWeights,
        limits: SandboxLimits,
        workers: int,
        feedback_mode: str | None = None,
        *,
        rename_lone_helper: bool,
        single_prompt: str,
        tool_use: ToolUse | None = None,
        robust: bool = False,
    ) -> None:
        """`feedback_mode` None: an env for single-turn evaluation, which never gives feedback.
        `single_prompt`: one of `SINGLE_PROMPTS`, what `solo_observe` tells one model alone.
        `tool_use`: the tools the agents may call within a turn (docs/tools.md); None = no tools.
        `robust`: also score the test pass rate a constant answer cannot earn (trivial_tests.py;
        the evaluation stages' env), which runs 7 more programs per problem the first time."""
        if feedback_mode is not None and feedback_mode not in FEEDBACK_MODES:
            raise ValueError(
                f"unknown feedback mode {feedback_mode!r}; use {', '.join(FEEDBACK_MODES)}"
            )
        if single_prompt not in SINGLE_PROMPTS:
            raise ValueError(
                f"unknown single prompt {single_prompt!r}; use {', '.join(SINGLE_PROMPTS)}"
            )
        self.roles, self.weights, self.limits, self.workers = roles, weights, limits, workers
        self.feedback_mode = feedback_mode
        self.rename_lone_helper = rename_lone_helper
        self.single_prompt = single_prompt
        self.tool_use = tool_use
        self.robust = robust
        self._trivial: dict[str, tuple[bool, ...]] = {}  # problem id -> its tests' trivial flags

    # ------------------------------------------------------------------ the contract
    def observe(self, task: Problem, agent: str, history: Sequence[Turn] = ()) -> Messages:
        first = prompts.initial_messages(task, self.roles, agent)
        if self.tool_use is not None:  # the tools' paragraph ends the task's message
            *head, last = first
            first = [
                *head,
                {**last, "content": f"{last['content']}\n\n{self.tool_use.instructions()}"},
            ]
        return with_history(first, history)

    def act(self, task: Problem, agent: str, text: str) -> str:
        return agent_code(text, task, self.roles, agent, rename_lone_helper=self.rename_lone_helper)

    def reference(self, task: Problem, agent: str) -> str | None:
        """The reference solution's code for this agent's role (None when the problem has none)."""
        if agent == self.roles.main:
            return task.main.reference or None
        return task.helpers[self.roles.helpers.index(agent)].reference or None

    def score(self, batch: Sequence[tuple[Problem, Mapping[str, str]]]) -> list[Outcome]:
        actions = [
            JointAction(p, tuple(code[a] for a in self.roles.helpers), code[self.roles.main])
            for p, code in batch
        ]
        # One batch for the rewards' and the role checks' programs: a program that runs into its
        # timeout in both costs the step one timeout, not two in a row.
        reward_jobs, finish_rewards = plan_rewards(actions, self.weights)
        check_jobs, finish_checks = plan_role_checks(actions)
        reports = run_many([*reward_jobs, *check_jobs], self.limits, self.workers)
        scored = finish_rewards(reports[: len(reward_jobs)])
        checks = finish_checks(reports[len(reward_jobs) :])
        if self.robust:
            self._learn_trivial([p for p, _ in batch])
        return [
            self._outcome(action, reward, report, check)
            for action, (reward, report), check in zip(actions, scored, checks, strict=True)
        ]

    def feedback(self, outcome: Outcome, agent: str, advice: str | None = None) -> str:
        if self.feedback_mode is None:
            raise ValueError("this code env was built without a feedback mode (train.feedback)")
        return prompts.feedback_message(self.feedback_mode, outcome.notes, advice)

    # ------------------------------------------------------------------ the baselines' views
    def solo_observe(self, task: Problem) -> Messages:
        """One model alone writes the whole entry point (the single-model baseline), told the
        helpers' contract too with `single_prompt` helper_contract."""
        return prompts.single_messages(task, contract=self.single_prompt == "helper_contract")

    def solo_act(self, task: Problem, text: str) -> dict[str, str]:
        """A lone model's completion as the team's joint action: its program in main's place."""
        code = extract_code(text, keep=[task.main.name])
        return {**{a: "" for a in self.roles.helpers}, self.roles.main: code}

    def observe_after_helpers(self, task: Problem, helper_actions: Mapping[str, str]) -> Messages:
        """Main's first observation with the helpers' finished code shown (sequential pipeline)."""
        messages = self.observe(task, self.roles.main)
        note = prompts.teammates_done_note(dict(helper_actions))
        last = messages[-1]
        return [*messages[:-1], {"role": last["role"], "content": f"{last['content']}\n\n{note}"}]

    def teammates_feedback(self, actions: Mapping[str, str], agent: str) -> str:
        """The discussion round's message: the other agents' answers, and a request to revise."""
        return prompts.teammates_answer_note({b: c for b, c in actions.items() if b != agent})

    # ------------------------------------------------------------------ scoring details
    def _learn_trivial(self, problems: Sequence[Problem]) -> None:
        """The trivial tests of the problems not seen before, in one sandbox batch."""
        new = list({p.id: p for p in problems if p.id not in self._trivial}.values())
        if new:
            self._trivial.update(trivial_tests(new, self.limits, self.workers))

    def _robust_rate(self, problem: Problem, report: TestReport | None) -> float | None:
        """The fraction of the non-trivial tests passed (a program that did not run: none)."""
        trivial = self._trivial[problem.id]
        passed = report.passed if report is not None and report.passed else (False,) * len(trivial)
        return robust_pass_rate(passed, trivial)

    def _outcome(
        self,
        action: JointAction,
        reward: RewardBreakdown,
        report: TestReport | None,
        checks: RoleChecks,
    ) -> Outcome:
        problem = action.problem
        facts = action.facts()
        correct = bool(report is not None and report.passed and all(report.passed))
        aux_defined = sum(h.defined for h in facts.helpers) / len(facts.helpers)
        metrics = {
            "reward/structure": reward.structure,
            "reward/syntax": reward.syntax,
            "reward/tests": reward.tests,
            "reward/cooperation": reward.cooperation,
            "reward/total": reward.total,
            "pass_rate": reward.pass_rate,
            # the paper's coop metric: main calls aux in a program that passes at least one test
            "coop_rate": float(reward.main_calls_aux and reward.pass_rate > 0),
            # the roles one by one (instruments, not rewards): see role_checks.py
            "correct_rate": float(correct),
            "aux_defined_rate": aux_defined,
            "main_calls_aux_rate": float(reward.main_calls_aux),
        }
        if checks.aux_correct is not None:  # absent = n/a, so step means skip it
            metrics["aux_correct_rate"] = checks.aux_correct
        if checks.main_correct_with_reference_aux is not None:
            metrics["main_correct_ref_aux_rate"] = float(checks.main_correct_with_reference_aux)
        record = {
            "helper_names": [h.name for h in problem.helpers],
            "main_name": problem.main.name,
            "program": action.program(),
            "reward": reward.to_dict(),
            "main_defined": facts.main_defined,
            "correct": correct,
            "aux_defined": aux_defined,
            "aux_correct": checks.aux_correct,
            "main_correct_ref_aux": checks.main_correct_with_reference_aux,
            "n_passed": report.n_passed if report else 0,
            "n_tests": len(problem.tests),
            "first_failure": report.first_failure if report else None,
        }
        if self.robust:  # only then: the training env's metrics and records stay as they were
            robust = self._robust_rate(problem, report)
            record["robust_pass_rate"] = robust
            if robust is not None:
                metrics["robust_pass_rate"] = robust
        notes = prompts.diagnostics(problem, reward, report, action.main_code)
        return Outcome(reward.total, metrics, record, notes, detail=report)
