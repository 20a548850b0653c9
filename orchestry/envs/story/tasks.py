"""The story task's data: themes (one task each), the roles' duties and Claude's judge prompt.

All three are files the project writes under `data/story/` (`paths.STORY_DATA`): `themes.yaml` (a
list of {id, theme, protagonist, setting}), `roles.yaml` (role name -> duty) and `judge_prompt.md`
(a template with `{theme}` and `{story}`). Loading checks every entry and names the file and the
entry that is wrong.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from orchestry import paths

SETS = ("story",)
"""The task sets this environment offers (each a file of themes)."""
DEFAULT_ROLES = ("writer", "editor", "narrator")
"""The first form's team: opening, middle, ending."""

_NAME = re.compile(r"[A-Z][a-z]+")


@dataclass(frozen=True)
class StoryTask:
    """One theme the team writes a short story on."""

    id: str
    theme: str
    """One sentence: what the story is about."""
    protagonist: str
    """The main character's name (one capitalised word; the reward looks for it)."""
    setting: str
    """Where the story takes place."""


_KEYS = tuple(f.name for f in fields(StoryTask))


def to_dict(task: StoryTask) -> dict[str, str]:
    """The task as a JSON-able dict (the prepared splits' rows)."""
    return asdict(task)


def task_from_dict(d: dict[str, Any], where: str = "task") -> StoryTask:
    """A task from its dict; ValueError naming `where` and the bad field."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: a story task is a mapping of {list(_KEYS)}, got {d!r}")
    missing, extra = set(_KEYS) - set(d), set(d) - set(_KEYS)
    if missing or extra:
        raise ValueError(
            f"{where}: a story task has exactly the keys {list(_KEYS)}"
            + (f"; missing {sorted(missing)}" if missing else "")
            + (f"; unknown {sorted(extra)}" if extra else "")
        )
    for key in _KEYS:
        if not isinstance(d[key], str) or not d[key].strip():
            raise ValueError(f"{where}: {key!r} must be a non-empty string, got {d[key]!r}")
    if not _NAME.fullmatch(d["protagonist"]):
        raise ValueError(
            f"{where}: protagonist {d['protagonist']!r} must be one capitalised word (a name)"
        )
    return StoryTask(**{key: d[key].strip() for key in _KEYS})


def _read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise ValueError(f"story data file {path} is missing")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {err}") from err


def load_set(name: str, data_dir: Path = paths.STORY_DATA) -> list[StoryTask]:
    """The tasks of one set (`SETS`), in file order; ValueError naming the set, file or entry."""
    if name not in SETS:
        raise ValueError(f"unknown story set {name!r}; the story sets are {', '.join(SETS)}")
    path = data_dir / "themes.yaml"
    entries = _read_yaml(path)
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty list of themes")
    tasks = [task_from_dict(e, f"{path} entry {i + 1}") for i, e in enumerate(entries)]
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise ValueError(f"{path}: id {task.id!r} appears twice")
        seen.add(task.id)
    return tasks


def load_roles(data_dir: Path = paths.STORY_DATA) -> dict[str, str]:
    """Role name -> the duty of its part, from roles.yaml."""
    path = data_dir / "roles.yaml"
    roles = _read_yaml(path)
    if not isinstance(roles, dict) or not roles:
        raise ValueError(f"{path}: expected a mapping of role name -> duty")
    for role, duty in roles.items():
        if not isinstance(role, str) or not isinstance(duty, str) or not duty.strip():
            raise ValueError(f"{path}: role {role!r} needs a non-empty duty string, got {duty!r}")
    return {role: duty.strip() for role, duty in roles.items()}


def load_judge_prompt(data_dir: Path = paths.STORY_DATA) -> str:
    """Claude's story judge prompt: a template with `{theme}` and `{story}`."""
    path = data_dir / "judge_prompt.md"
    if not path.is_file():
        raise ValueError(f"story judge prompt {path} is missing")
    template = path.read_text(encoding="utf-8")
    for slot in ("{theme}", "{story}"):
        if slot not in template:
            raise ValueError(f"{path}: the judge prompt must contain the placeholder {slot}")
    return template
