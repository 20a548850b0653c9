"""The code-review task as the registry builds it (`env.name: code_review`)."""

from __future__ import annotations

from orchestry.envs.base import Roles
from orchestry.envs.code import tasks
from orchestry.envs.code_review.env import CodeReviewEnv
from orchestry.envs.code_review.reward import CodeReviewSettings
from orchestry.envs.kinds import EnvKind
from orchestry.envs.options import EnvOptions


def build(roles: Roles, o: EnvOptions) -> CodeReviewEnv:
    s = o.settings
    review = CodeReviewSettings(
        tests_weight=s["tests"],
        syntax_weight=s["syntax"],
        review_weight=s["review"],
        review_max_words=s["review_max_words"],
    )
    return CodeReviewEnv(roles, review, o.limits, o.workers)


KIND = EnvKind(
    "code_review", build, tasks, ("writer", "reviewer", "refactorer"), code_problems=True
)
