"""Each stage's code dependencies: the import closure of its module, read statically.

A stage must rerun when any code it can execute changes, including modules imported lazily inside a
function (the Claude agents behind `evaluate.backend: claude`) and files run by path (the sandbox's
child side). The Snakemake rules take their code inputs from `stage_code(name)`; dvc.yaml lists the
same files, and tests/test_architecture.py fails when the two drift.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = "orchestry"
ROOT = Path(__file__).resolve().parent.parent
STAGES = (
    "prepare",
    "smoke",
    "train",
    "train_single",
    "baseline",
    "evaluate",
    "evaluate_single",
    "prompt_policy",
    "beam",
    "schemes",
    "figures",
    "orchestrate",  # opt-in: optional/dvc.yaml
)
# The CLI's commands beside the stages (schema, params-doc, deps, show): cli.py imports them inside
# `main`, only when one is asked for, so they are no stage's code (a test checks the import is lazy).
CLI_COMMANDS = ("orchestry.commands",)
# The pipeline files whose stages list their code (`with_stage_code`).
DVC_FILES = (ROOT / "dvc.yaml", ROOT / "optional" / "dvc.yaml")
# Modules that run other files of the package by path rather than importing them.
READ_AS_FILES = {
    "orchestry.envs.code.sandbox.isolation": (
        "orchestry.envs.code.sandbox.harness",
        "orchestry.envs.code.sandbox.strict_operators",
        "orchestry.envs.code.sandbox.wire",
        "orchestry.envs.code.sandbox.worker",
        "orchestry.envs.code.sandbox.checker",
    ),
}


def module_file(module: str) -> Path | None:
    """The source file of a package module (a package's __init__.py), or None if not ours."""
    base = ROOT / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _import_names(tree: ast.Module) -> list[str]:
    """Every absolute name a module's imports may bind (module level or inside functions): for
    `from pkg import name`, both pkg and pkg.name (name may be a submodule or an attribute)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def _imported(module: str, tree: ast.Module) -> set[str]:
    """Modules of ours that a module imports anywhere (module level or inside functions)."""
    found = {n for n in _import_names(tree) if n.split(".")[0] == PACKAGE and module_file(n)}
    if module == f"{PACKAGE}.cli":
        found -= set(CLI_COMMANDS)
    return found | set(READ_AS_FILES.get(module, ()))


def _with_parents(module: str) -> list[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_closure(*roots: str) -> set[str]:
    """Every module of ours that importing `roots` can execute."""
    seen: set[str] = set()
    todo = [m for r in roots for m in _with_parents(r)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = module_file(module)
        if path is None:
            raise ValueError(f"{module} is not a module of {PACKAGE}")
        for dep in _imported(module, ast.parse(path.read_text(), str(path))):
            todo.extend(_with_parents(dep))
    return seen


def stage_code(stage: str) -> list[str]:
    """The source files (relative to the project root) that `python -m orchestry <stage>` runs."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
    closure = import_closure(f"{PACKAGE}.__main__", f"{PACKAGE}.stages.{stage}")
    files = {module_file(m) for m in closure}
    return sorted(str(f.relative_to(ROOT)) for f in files if f is not None)


def script_code(script: Path) -> list[str]:
    """The source files a script run by path executes (a benchmark): the script, the sibling scripts
    it imports by bare name (from its own folder), and the import closure of our modules it imports."""
    scripts: set[Path] = set()
    modules: set[str] = set()
    todo = [script.resolve()]
    while todo:
        path = todo.pop()
        if path in scripts:
            continue
        scripts.add(path)
        for name in _import_names(ast.parse(path.read_text(), str(path))):
            if name.split(".")[0] == PACKAGE and module_file(name):
                modules.add(name)
            elif "." not in name and (path.parent / f"{name}.py").is_file():
                todo.append(path.parent / f"{name}.py")
    files = {module_file(m) for m in import_closure(*modules)} if modules else set()
    return sorted(str(f.relative_to(ROOT)) for f in files | scripts if f is not None)


_STAGE = re.compile(r"^  ([A-Za-z_]\w*):\s*$")
_CODE_DEP = re.compile(r"^(\s+)- orchestry/\S+\s*$")
_DEPS = re.compile(r"^(\s+)deps:\s*$")


def with_stage_code(dvc_yaml: str) -> str:
    """`dvc_yaml` with each stage's `orchestry/` deps replaced by `stage_code(stage)`, in place of
    the old ones (or first under `deps:`); other deps, comments and layout are kept."""
    out: list[str] = []
    stage: str | None = None
    written: set[str] = set()
    lines = dvc_yaml.splitlines(keepends=True)
    for i, line in enumerate(lines):
        match = _STAGE.match(line)
        if match:
            stage = match.group(1)
        code = _CODE_DEP.match(line)
        if code and stage is not None:
            if stage not in written:
                out += [f"{code.group(1)}- {f}\n" for f in stage_code(stage)]
                written.add(stage)
            continue
        out.append(line)
        deps = _DEPS.match(line)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if deps and stage is not None and stage not in written and not _CODE_DEP.match(nxt):
            indent = deps.group(1) + "  "
            out += [f"{indent}- {f}\n" for f in stage_code(stage)]
            written.add(stage)
    return "".join(out)


def first_stale_stage(current: str, wanted: str) -> str:
    """The stage of the first line where two versions of a dvc.yaml differ."""
    stage = "<top>"
    for have, want in zip(current.splitlines(), wanted.splitlines(), strict=False):
        match = _STAGE.match(want)
        if match:
            stage = match.group(1)
        if have != want:
            return stage
    return stage
