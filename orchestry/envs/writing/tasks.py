"""The writing tasks: a Reddit post to summarise twice (TL;DR) or an abstract to expand (arXiv).

The corpus is the project's own, written for it (no download): `data/writing/tldr.yaml` holds 40
everyday posts and `data/writing/arxiv.yaml` 40 abstracts of invented papers, each a list of
`{id, title, source}` entries with ids `<set>/NNN`. The paper's sets (trl-lib/tldr and
OpenMLRL/arXiv_abstract) play these roles there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestry import paths

SETS = ("tldr", "arxiv")
DEFAULT_ROLES = ("first", "second")
"""Agent 1 writes part 1 (the concise summary, or the background paragraph), agent 2 part 2."""
_FIELDS = ("id", "kind", "title", "source")


@dataclass(frozen=True)
class WritingTask:
    id: str
    kind: str
    """`tldr` or `arxiv`: which pair of parts the team writes."""
    title: str
    """The post's or the paper's title."""
    source: str
    """The post or the abstract."""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a writing task needs a non-empty id")
        if self.kind not in SETS:
            raise ValueError(f"task {self.id}: kind {self.kind!r} is not one of {SETS}")
        if not self.source.strip():
            raise ValueError(f"task {self.id}: source is empty")


def to_dict(task: WritingTask) -> dict[str, str]:
    return {name: getattr(task, name) for name in _FIELDS}


def task_from_dict(d: dict[str, Any]) -> WritingTask:
    """A task from its `to_dict` form; KeyError/TypeError name what is missing or wrong."""
    if not isinstance(d, dict):
        raise TypeError(f"a writing task must be a mapping, got {type(d).__name__}")
    missing = [k for k in _FIELDS if k not in d]
    if missing:
        raise KeyError(f"writing task {d.get('id', '?')}: missing keys {missing}")
    unknown = sorted(set(d) - set(_FIELDS))
    if unknown:
        raise KeyError(f"writing task {d['id']}: unknown keys {unknown}; expected {list(_FIELDS)}")
    for k in _FIELDS:
        if not isinstance(d[k], str):
            raise TypeError(f"writing task {d['id']}: {k} must be a string")
    return WritingTask(**{k: d[k] for k in _FIELDS})


def load_set(name: str, root: Path = paths.WRITING_DATA) -> list[WritingTask]:
    """The tasks of set `name` (`tldr` or `arxiv`) from `root/<name>.yaml`."""
    if name not in SETS:
        raise ValueError(f"unknown writing set {name!r}; known sets: {', '.join(SETS)}")
    path = Path(root) / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the {name} writing set is missing")
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty list of {{id, title, source}} entries")
    tasks, seen = [], set()
    for i, entry in enumerate(entries):
        where = f"{path} entry {i}"
        if not isinstance(entry, dict) or set(entry) != {"id", "title", "source"}:
            keys = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ValueError(f"{where}: expected keys id, title, source; got {keys}")
        tid = entry["id"]
        if not isinstance(tid, str) or not tid.startswith(f"{name}/"):
            raise ValueError(f"{where}: id {tid!r} must be a string starting with '{name}/'")
        if tid in seen:
            raise ValueError(f"{where}: duplicate id {tid!r}")
        seen.add(tid)
        if not all(isinstance(entry[k], str) and entry[k].strip() for k in ("title", "source")):
            raise ValueError(f"{where} ({tid}): title and source must be non-empty strings")
        tasks.append(WritingTask(tid, name, entry["title"].strip(), entry["source"].strip()))
    return tasks
