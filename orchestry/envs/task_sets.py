"""The task modules of the text environments by `env.name` (the code task has its own problem files).

Each module offers `SETS`, `load_set(name)`, `to_dict(task)` and `task_from_dict(row)`: the prepare
stage splits its sets, and every other stage reads the prepared rows back through it.
"""

from __future__ import annotations

from types import ModuleType

from orchestry.envs.story import tasks as story_tasks
from orchestry.envs.writing import tasks as writing_tasks

TEXT_TASKS: dict[str, ModuleType] = {"story": story_tasks, "writing": writing_tasks}
