"""What the stages hand an environment's builder: its own params section and the shared settings,
as plain values (`envs/` never sees `Params`; `stages/from_params.py` fills this in)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestry.envs.code.sandbox import SandboxLimits


@dataclass(frozen=True)
class EnvOptions:
    settings: Mapping[str, Any]
    """The environment's own params section (`env.<name>`), {} when it has none."""
    reward: Mapping[str, float]
    """The `reward` section (the code task's level-reward weights)."""
    limits: SandboxLimits
    """The sandbox limits (the envs that run programs)."""
    workers: int
    """Sandbox worker processes."""
    feedback: str | None
    """`train.feedback` when training (None in evaluation, which is single-turn)."""
    rename_lone_helper: bool
    """`env.rename_lone_helper` (the code task)."""
    single_prompt: str
    """`env.single_prompt`: what one model alone is told (the code task; `plain` elsewhere)."""
    tools: Mapping[str, Any]
    """The `env.tools` section (the code task's tools within a turn; `enabled` false = none)."""
    evaluation: bool = False
    """Built for an evaluation stage: the code task adds its robust test pass rate (training, never:
    its metrics stay as they were)."""
    judge: Callable[[], Any] = field(default=lambda: None)
    """Makes the env's LLM judge when params ask for one (the story's Claude judge), else None."""
