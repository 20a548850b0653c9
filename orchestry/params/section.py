"""The base of every params section: unknown keys are errors, values are checked on assignment too."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A params section: unknown keys are errors, values are checked on assignment too."""

    model_config = ConfigDict(extra="forbid", frozen=True)
