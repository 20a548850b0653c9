"""Each stage's code dependencies: the import closure of its module, read statically.

A stage must rerun when any code it can execute changes, including modules imported lazily inside a
function (the Claude agents behind `evaluate.backend: claude`) and files run by path (the sandbox's
child side). The Snakemake rules take their code inputs from `stage_code(name)`; dvc.yaml lists the
same files, and tests/test_architecture.py fails when the two drift.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "orchestry"
ROOT = Path(__file__).resolve().parents[2]
STAGES = (
    "prepare",
    "sft",
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
CLI_COMMANDS = ("orchestry.bookkeeping.commands",)
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


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in `body` and in the bodies nested in it (functions, classes, branches,
    loops, `with`, `try` and its handlers, `match` cases). Imports and docstrings are statements,
    so walking these alone, not every expression node, finds all of them."""
    for stmt in body:
        yield stmt
        for field in ("body", "orelse", "finalbody"):
            nested = getattr(stmt, field, None)
            if isinstance(nested, list):
                yield from _statements(nested)
        for block in (*getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())):
            yield from _statements(block.body)


def _import_names(tree: ast.Module) -> list[str]:
    """Every absolute name a module's imports may bind (module level or inside functions): for
    `from pkg import name`, both pkg and pkg.name (name may be a submodule or an attribute)."""
    names: list[str] = []
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


@dataclass(frozen=True)
class _Source:
    """What the closure and the fingerprint read from one Python file, from one parse."""

    imports: tuple[str, ...]
    digest: str


_READ: dict[bytes, _Source] = {}
"""`_source` by file content: `deps` follows 13 closures over the same files, each parsed once."""


def _source(path: Path) -> _Source:
    """The import names and the code digest of a Python file (cached by its content, so an edited
    file is read anew)."""
    data = path.read_bytes()
    if data not in _READ:
        tree = ast.parse(data, str(path))
        imports = tuple(_import_names(tree))
        dump = ast.dump(_without_docstrings(tree), annotate_fields=False, include_attributes=False)
        _READ[data] = _Source(imports, hashlib.sha256(dump.encode()).hexdigest())
    return _READ[data]


def _imported(module: str, names: Iterable[str]) -> set[str]:
    """Modules of ours that a module imports anywhere (module level or inside functions), from
    its import names."""
    found = {n for n in names if n.split(".")[0] == PACKAGE and module_file(n)}
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
        for dep in _imported(module, _source(path).imports):
            todo.extend(_with_parents(dep))
    return seen


def constant(module: str, name: str) -> object:
    """The literal a module assigns to `name` at its top level, read without importing it (where a
    registry keeps the dotted path of a plug-in it imports by name)."""
    path = module_file(module)
    if path is None:
        raise ValueError(f"{module} is not a module of {PACKAGE}")
    for node in ast.parse(path.read_text(), str(path)).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            return ast.literal_eval(node.value)
    raise ValueError(f"{module} assigns no {name}")


def stage_code(stage: str, plugins: Iterable[tuple[str, str]] = ()) -> list[str]:
    """The source files (relative to the project root) that `python -m orchestry <stage>` runs:
    its module's import closure, plus each plug-in `(registry, module)` whose registry module is in
    it (the modules params select by name: the environment, the CUDA engine, Claude, the pipeline),
    followed until no chosen plug-in is left out."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
    chosen = list(plugins)
    closure = import_closure(f"{PACKAGE}.__main__", f"{PACKAGE}.stages.{stage}")
    while True:
        more = {m for registry, m in chosen if registry in closure and m not in closure}
        if not more:
            break
        closure |= import_closure(*more)
    files = {module_file(m) for m in closure}
    return sorted(str(f.relative_to(ROOT)) for f in files if f is not None)


def _without_docstrings(tree: ast.Module) -> ast.Module:
    """`tree` without its string statements: docstrings of modules, classes and functions, and
    the ones under assignments (no-ops when run; only prose). A body left empty holds `pass`."""
    blocks: list[ast.AST] = [tree]
    for stmt in _statements(tree.body):
        blocks += [stmt, *getattr(stmt, "handlers", ()), *getattr(stmt, "cases", ())]
    for node in blocks:
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            kept = [
                stmt
                for stmt in body
                if not (
                    isinstance(stmt, ast.Expr)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                )
            ]
            setattr(node, field, kept or [ast.Pass()])
    return tree


def code_digest(path: Path) -> str:
    """sha256 of what a file does: for Python its syntax tree without docstrings (comments and
    layout are not in it), so editing prose reruns nothing; other files byte for byte."""
    if path.suffix == ".py":
        return _source(path).digest
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
        for name in _source(path).imports:
            if name.split(".")[0] == PACKAGE and module_file(name):
                modules.add(name)
            elif "." not in name and (path.parent / f"{name}.py").is_file():
                todo.append(path.parent / f"{name}.py")
    files = {module_file(m) for m in import_closure(*modules)} if modules else set()
    return sorted(str(f.relative_to(ROOT)) for f in files | scripts if f is not None)
