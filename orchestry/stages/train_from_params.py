"""The train section -> the training loop's settings and Claude hooks (the rest of the params
become objects in `stages/from_params.py`). Apart, so a stage that does not train (the baselines,
evaluate) does not depend on the rollout tree, the MAGRPO math or the update."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestry.agents.base import SamplingSpec
from orchestry.algos.magrpo import AdvantageSettings
from orchestry.algos.pg_update import OptimizerSettings, UpdateSettings
from orchestry.algos.tree import ExpertFn, JudgeFn, RolloutSettings
from orchestry.params import Params
from orchestry.stages.from_params import (
    claude_backend,
    claude_settings,
    microbatch,
    sampling_spec,
)


def rollout_settings(params: Params) -> RolloutSettings:
    t = params.train
    return RolloutSettings(
        group_size=t.group_size,
        turns=t.turns,
        gamma=t.gamma,
        joint_mode=t.joint_mode,
        early_stop_reward=t.early_stop_reward,
        judge_weight=t.judge_weight,
        expert_feedback=t.feedback == "expert_edits",
        credit_weight=t.credit_weight,
    )


def advantage_settings(params: Params) -> AdvantageSettings:
    t = params.train
    return AdvantageSettings(mode=t.advantage_mode, normalize=t.normalize, std_floor=t.std_floor)


def optimizer_settings(params: Params) -> OptimizerSettings:
    t = params.train
    return OptimizerSettings(
        lr=t.lr, weight_decay=t.weight_decay, schedule=t.schedule, warmup_steps=t.warmup_steps
    )


def update_settings(params: Params) -> UpdateSettings:
    t = params.train
    return UpdateSettings(
        logprob_reduction=t.logprob_reduction,
        kl_coef=t.kl_coef,
        grad_clip=t.grad_clip,
        microbatch=microbatch(params),
        shared_adapter=params.model.shared_adapter,
    )


def claude_hooks(params: Params, out_dir: Path) -> tuple[ExpertFn | None, JudgeFn | None]:
    """Expert-edits feedback and the judge term, when params ask for them (else None, None)."""
    need_expert = params.train.feedback == "expert_edits" and params.train.turns > 1
    need_judge = params.train.judge_weight > 0
    if not (need_expert or need_judge):
        return None, None
    claude = claude_backend()
    client = claude.ClaudeClient(claude_settings(params, out_dir))
    expert: ExpertFn | None = None
    judge: JudgeFn | None = None
    if need_expert:

        def expert(problem, code, diag):  # noqa: E306
            return claude.expert_edits(client, problem.prompt, code, diag)

    if need_judge:

        def judge(problem, code):  # noqa: E306
            return claude.judge_cooperation(client, problem.prompt, code)

    return expert, judge


@dataclass(frozen=True)
class LoopSettings:
    """Everything the training loop (`stages/train.py` `train_loop`) reads of the params."""

    agents: list[str]
    shared_adapter: bool
    seed: int
    sampling: SamplingSpec
    rollout: RolloutSettings
    advantages: AdvantageSettings
    update: UpdateSettings
    optimizer: OptimizerSettings
    curriculum: str
    """`train.curriculum`: easy_first draws the later epochs' problems by success."""
    problems_per_step: int
    curriculum_promote: float
    parallel: str
    """`train.parallel`: pipeline = one process generates while the other updates."""
    rollouts_ahead: int
    checkpoint_every: int


def loop_settings(params: Params) -> LoopSettings:
    """The training loop's settings for these params (the team's, or `single_agent_params`)."""
    t = params.train
    return LoopSettings(
        agents=list(params.model.agents),
        shared_adapter=params.model.shared_adapter,
        seed=params.seed,
        sampling=sampling_spec(params),
        rollout=rollout_settings(params),
        advantages=advantage_settings(params),
        update=update_settings(params),
        optimizer=optimizer_settings(params),
        curriculum=t.curriculum,
        problems_per_step=t.problems_per_step,
        curriculum_promote=t.curriculum_promote,
        parallel=t.parallel,
        rollouts_ahead=t.rollouts_ahead,
        checkpoint_every=t.checkpoint_every,
    )
