"""The code task as the registry builds it (`env.name: code`)."""

from __future__ import annotations

from orchestry.envs.base import Roles
from orchestry.envs.code import tasks
from orchestry.envs.code.env import CodeEnv
from orchestry.envs.code.reward import RewardWeights
from orchestry.envs.kinds import EnvKind
from orchestry.envs.options import EnvOptions
from orchestry.envs.tools.protocol import ToolBudget
from orchestry.envs.tools.registry import ToolUse


def build(roles: Roles, o: EnvOptions) -> CodeEnv:
    weights = RewardWeights(**o.reward)
    t = o.tools
    tool_use = (
        ToolUse(tuple(t["names"]), ToolBudget(t["max_calls"], t["max_result_chars"]), o.limits)
        if t["enabled"]
        else None
    )
    return CodeEnv(
        roles,
        weights,
        o.limits,
        o.workers,
        o.feedback,
        rename_lone_helper=o.rename_lone_helper,
        single_prompt=o.single_prompt,
        tool_use=tool_use,
        robust=o.evaluation,
    )


KIND = EnvKind("code", build, tasks, ("aux", "main"), code_problems=True)
