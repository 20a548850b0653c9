"""The story task as the registry builds it (`env.name: story`)."""

from __future__ import annotations

from orchestry.envs.base import Roles
from orchestry.envs.kinds import EnvKind
from orchestry.envs.options import EnvOptions
from orchestry.envs.story import tasks
from orchestry.envs.story.env import StoryEnv
from orchestry.envs.story.reward import StorySettings


def build(roles: Roles, o: EnvOptions) -> StoryEnv:
    s = o.settings
    settings = StorySettings(
        quality_weight=s["quality"],
        collaboration_weight=s["collaboration"],
        efficiency_weight=s["efficiency"],
        turns_range=(s["turns_range"][0], s["turns_range"][1]),
        words_range=(s["words_range"][0], s["words_range"][1]),
    )
    return StoryEnv(roles, settings, tasks.load_roles(), judge=o.judge())


KIND = EnvKind("story", build, tasks, tasks.DEFAULT_ROLES)
