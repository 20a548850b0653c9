"""The house rules of shared/ARCHITECTURE.md: import contracts, module size, stage code dependencies."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from test_pipeline import dvc_stages

from orchestry.bookkeeping import code_deps, fingerprint
from orchestry.envs.code.sandbox import isolation
from orchestry.params import parse_params

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def test_import_contracts_hold():
    """layers, Params only in stages/cli, no torch in envs (pyproject.toml [tool.importlinter])."""
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "0 broken" in proc.stdout


def test_no_module_over_400_lines():
    big = {
        str(p.relative_to(ROOT)): n
        for p in sorted((ROOT / "orchestry").rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_closure_follows_lazy_imports_and_files_run_by_path():
    # the sandbox's child side is run by path, never imported
    assert {str(p.relative_to(ROOT)) for p in isolation.CHILD_FILES} <= set(
        code_deps.stage_code("train", fingerprint.plugins(parse_params({})))
    )
    assert not any("torch" in f or "agents/" in f for f in code_deps.stage_code("figures"))


def test_files_read_as_code_are_the_sandbox_child_files():
    declared = code_deps.READ_AS_FILES["orchestry.envs.code.sandbox.isolation"]
    assert {code_deps.module_file(m) for m in declared} == set(isolation.CHILD_FILES)


@pytest.mark.parametrize("stage", list(dvc_stages()))
def test_a_stage_s_code_dependency_is_its_fingerprint(stage):
    """dvc.yaml lists no code file: each stage depends on results/fingerprints/<stage>.txt, which
    the first stage writes (Snakemake's rules take the same file)."""
    deps = dvc_stages()[stage].get("deps", [])
    assert not [d for d in deps if d.startswith("orchestry/")], stage
    if stage == "fingerprints":
        assert set(deps) == {"orchestry"}
    else:
        assert f"results/fingerprints/{stage.split('@')[0]}.txt" in deps


def test_the_committed_fingerprints_are_the_code_as_it_is():
    """`python -m orchestry deps --check`: every fingerprint is the one params.yaml and the code
    give (else `dvc status` would not see an edit: run `dvc repro` or `python -m orchestry deps`)."""
    proc = subprocess.run(
        [sys.executable, "-m", "orchestry", "deps", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_cli_commands_are_no_stage_code():
    """Editing the params reference generator or the episode viewer reruns no stage."""
    for stage in code_deps.STAGES:
        code = set(code_deps.stage_code(stage))
        assert not code & {
            "orchestry/bookkeeping/commands.py",
            "orchestry/bookkeeping/params_doc.py",
        }, stage
        assert "orchestry/analysis/show.py" not in code, stage
    cli = ast.parse((ROOT / "orchestry/cli.py").read_text())
    top = [n for n in cli.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = {a.name for n in top for a in n.names}
    names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert (
        not {"commands", "orchestry.bookkeeping.commands", "orchestry.bookkeeping.params_doc"}
        & names
    )


def module_level_imports(path: Path, module: str) -> set[str]:
    """The orchestry modules `module` imports at its top level: its body's imports, those under
    `if`/`try` included, `if TYPE_CHECKING:` too (a type-only loop still ties the modules together).
    Left out: imports inside functions, which run when called, after every module has loaded (the
    lazy imports that keep the Claude client or a stage's heavy stack out of other closures)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for part in (
                    node.body,
                    node.orelse,
                    node.finalbody,
                    *(h.body for h in node.handlers),
                ):
                    visit(part)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)  # a submodule, if it is one

    visit(ast.parse(path.read_text()).body)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / "orchestry").rglob("*.py")
    }
    return {m: module_level_imports(p, m) & set(files) - {m} for m, p in files.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return cycles


def test_no_import_cycle_inside_orchestry():
    """No module imports, at load time, one that imports it back (directly or round a loop)."""
    assert import_cycles(import_graph()) == []


def test_the_cycle_check_finds_a_loop(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    text = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import x\nfrom .y import z\n"
    path = tmp_path / "m.py"
    path.write_text(text)
    expected = {
        "typing",
        "typing.TYPE_CHECKING",
        "pkg.sub",
        "pkg.sub.x",
        "pkg.sub.y",
        "pkg.sub.y.z",
    }
    assert module_level_imports(path, "pkg.sub.m") == expected
