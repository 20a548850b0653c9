"""The writing task as the registry builds it (`env.name: writing`)."""

from __future__ import annotations

from orchestry.envs.base import Roles
from orchestry.envs.kinds import EnvKind
from orchestry.envs.options import EnvOptions
from orchestry.envs.writing import tasks
from orchestry.envs.writing.env import WritingEnv
from orchestry.envs.writing.reward import WritingSettings


def build(roles: Roles, o: EnvOptions) -> WritingEnv:
    return WritingEnv(roles, WritingSettings(**o.settings))


KIND = EnvKind("writing", build, tasks, ("first", "second"))
