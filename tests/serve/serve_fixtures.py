"""The real server on the embedded model, started for a test module: tiny params, fresh adapters
written by the team's own code (imported by the tests of this folder; a `conftest.py` here would
shadow the `conftest` module the tests import from tests/)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from conftest import tiny_params

from orchestry.params import load_params
from orchestry.serve.launch import server_process
from orchestry.stages.from_params import make_policy


@contextmanager
def served(
    root: Path,
    flags: Sequence[str] = (),
    params: dict[str, Any] | None = None,
) -> Iterator[tuple[str, Path]]:
    """(base URL, log file) of `python -m orchestry serve` with `flags`, on tiny params changed by
    `params` (sections, as `tiny_params` takes them)."""
    params_file = root / "params.yaml"
    params_file.write_text(yaml.safe_dump(tiny_params(**(params or {})), sort_keys=False))
    make_policy(load_params(params_file)).save_adapters(root / "adapters")
    log = root / "server.log"
    with server_process(params_file, root / "adapters", flags, log, torch_threads=1) as url:
        yield url, log
