"""The folder a comparison tool over reports writes (`orchestry.eval.ablation`, `orchestry.eval.seeds`):
its table as CSV and as markdown, and the manifest (the tool's import closure, its params and command),
replaced as a whole."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestry import io
from orchestry.bookkeeping.provenance import hardware, manifest
from orchestry.bookkeeping.recovered import tool_code


def csv_text(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per row (a missing cell empty, a float to six places) under the header."""
    lines = [",".join(columns)]
    for r in rows:
        cells = [r.get(c, "") for c in columns]
        lines.append(",".join(f"{c:.6f}" if isinstance(c, float) else str(c) for c in cells))
    return "\n".join(lines) + "\n"


def write_folder(
    out: Path,
    stem: str,
    table: str,
    markdown: str,
    module: str,
    params: dict[str, Any],
    command: Sequence[str],
    started: float,
) -> None:
    """`out`/{stem}.csv, {stem}.md and manifest.json, written beside and moved into place."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    io.write_text(partial / f"{stem}.csv", table)
    io.write_text(partial / f"{stem}.md", markdown)
    root = Path(__file__).resolve().parents[2]
    record = manifest(root, tool_code(module), params, hardware(), started, time.time() - started)
    record["command"] = " ".join(command)
    io.write_json(partial / "manifest.json", record)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
