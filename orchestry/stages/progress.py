"""The stages' progress bar: done/total, elapsed, ETA and a line of the latest numbers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(
    name: str, unit: str, total: int, start: int, show: bool = True
) -> Iterator[Callable[[int, str], None]]:
    """A progress bar with ETA; yields `advance(done, info)` (a no-op when not `show`)."""
    if not show:
        yield lambda done, info: None
        return
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn(f"{{task.completed}}/{{task.total}} {unit}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[info]}"),
    ]
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(name, total=total, completed=start, info="")

        def advance(done: int, info: str) -> None:
            bar.update(task, completed=done, info=info)

        yield advance
