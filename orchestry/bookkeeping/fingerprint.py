"""Each stage's code fingerprint: the files it can run for the params in force, a hash of each.

`python -m orchestry deps` (the pipeline's first stage, `fingerprints`) writes
results/fingerprints/<stage>.txt, one line per file: the hash of its code without docstrings
(`code_deps.code_digest`) and its path. DVC and Snakemake take that one small file as the stage's
code dependency, so an edit reruns the stages whose code it changes and no other; the stage's
manifest embeds the same lines. The closure follows the plug-ins params select by name (`plugins`):
`env.name`'s environment, the CUDA engine when `model.device` is not cpu, the Claude backend when a
setting calls Claude, the pipeline module under `train.parallel: pipeline`.

The stage keeps it honest (`cli.main`): before it runs, it writes its own fingerprint anew (the same
file DVC wrote, unless the code changed since); after, every package module loaded in its process
must be in it (else a registry imports code the fingerprint does not follow, and the stage fails
naming the module).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

from orchestry.bookkeeping import code_deps
from orchestry.bookkeeping.plugins import (
    CLAUDE_REGISTRY,
    ENGINE_REGISTRY,
    ENV_REGISTRY,
    PIPELINE_REGISTRY,
)
from orchestry.bookkeeping.provenance import fingerprint_path as path
from orchestry.bookkeeping.provenance import read_fingerprint as files
from orchestry.envs.catalog import env_entry
from orchestry.params import Params


class StaleFingerprint(RuntimeError):
    """A stage's fingerprint is not the code it runs: `python -m orchestry deps` writes it anew."""


def plugins(params: Params) -> list[tuple[str, str]]:
    """(registry module, plug-in module) for every plug-in these params select."""
    chosen: list[tuple[str, str]] = []
    module = env_entry(params.env.name).module
    if module is not None:
        chosen.append((ENV_REGISTRY, module))
    if params.model.device != "cpu":  # cuda, or auto (a GPU when there is one)
        engines = code_deps.constant(ENGINE_REGISTRY, "ENGINES")
        chosen.append((ENGINE_REGISTRY, engines["cuda"]))  # type: ignore[index]
    if params.uses_claude():
        chosen.append((CLAUDE_REGISTRY, str(code_deps.constant(CLAUDE_REGISTRY, "CLAUDE_BACKEND"))))
    if params.train.parallel == "pipeline":
        chosen.append((PIPELINE_REGISTRY, str(code_deps.constant(PIPELINE_REGISTRY, "PIPELINE"))))
    return chosen


def fingerprint(stage: str, params: Params) -> str:
    """The text of a stage's fingerprint: `<hash>  <file>` per file it can run, sorted."""
    files = code_deps.stage_code(stage, plugins(params))
    return "".join(f"{code_deps.code_digest(code_deps.ROOT / f)}  {f}\n" for f in files)


def write_all(params: Params, stages: Iterable[str] = code_deps.STAGES) -> list[Path]:
    """Write every stage's fingerprint; only files whose text changes are touched (so DVC and
    Snakemake see no change where there is none). The paths written."""
    written = []
    for stage in stages:
        target, text = path(stage), fingerprint(stage, params)
        if target.is_file() and target.read_text() == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")  # ranks of one run write it at once
        tmp.write_text(text)
        tmp.replace(target)
        written.append(target)
    return written


def module_files(modules: Iterable[str]) -> set[str]:
    """The package files of these module names (not ours: left out)."""
    found = set()
    for name in modules:
        if name == code_deps.PACKAGE or name.startswith(code_deps.PACKAGE + "."):
            file = code_deps.module_file(name)
            if file is not None:
                found.add(str(file.relative_to(code_deps.ROOT)))
            for by_path in code_deps.READ_AS_FILES.get(name, ()):  # run as files by that module
                found.add(str(code_deps.module_file(by_path).relative_to(code_deps.ROOT)))
    return found


def check_loaded(stage: str) -> None:
    """StaleFingerprint naming each package module loaded in this process (or run by path by
    one) that the stage's fingerprint does not hold."""
    missing = sorted(module_files(list(sys.modules)) - set(files(stage)))
    if missing:
        raise StaleFingerprint(
            f"stage {stage} ran code its fingerprint ({path(stage)}) does not hold: "
            f"{', '.join(missing)}. A module imported by name (importlib) must be a plug-in "
            "its registry names (orchestry/bookkeeping/fingerprint.py `plugins`) or a plain import"
        )
