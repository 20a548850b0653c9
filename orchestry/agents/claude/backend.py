"""The Claude backend as the stages reach it: one module, imported by dotted path only when params
choose Claude (`stages/from_params.py` `CLAUDE_BACKEND`), so a stage that never calls the API does
not depend on the client."""

from orchestry.agents.claude.agents import ClaudeAgents
from orchestry.agents.claude.client import ClaudeCallFailed, ClaudeClient, ClaudeSettings
from orchestry.agents.claude.critics import (
    expert_edits,
    judge_cooperation,
    judge_joint,
    judge_story,
)

__all__ = [
    "ClaudeAgents",
    "ClaudeCallFailed",
    "ClaudeClient",
    "ClaudeSettings",
    "expert_edits",
    "judge_cooperation",
    "judge_joint",
    "judge_story",
]
