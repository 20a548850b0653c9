"""The CUDA engine (`orchestry/agents/lora/cuda/`) behind its one seam (`agents/lora/engine.py`): a
CPU run imports none of it, no CPU-path file names it in an import statement (what the stages'
code lists follow, `bookkeeping/code_deps.py`), and the engine's package reaches every file of it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from orchestry.agents.lora import engine
from orchestry.bookkeeping.code_deps import import_closure, module_file

ROOT = Path(__file__).resolve().parents[2]
ENGINE_DIR = ROOT / "orchestry" / "agents" / "lora" / "cuda"
CPU_ROOTS = (
    "orchestry.stages.train",
    "orchestry.stages.evaluate",
    "orchestry.stages.baseline",
    "orchestry.stages.from_params",
    "orchestry.agents.lora.team",
)


def _files(*modules: str) -> set[Path]:
    return {module_file(m) for m in import_closure(*modules)} - {None}


@pytest.mark.slow  # starts processes: the slow tier (make test), not the edit loop
def test_a_cpu_run_imports_no_engine_file() -> None:
    code = (
        f"import sys\nimport {', '.join(CPU_ROOTS)}\n"
        "print(sorted(m for m in sys.modules if m.startswith('orchestry.agents.lora.cuda')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_cpu_closure_holds_no_engine_file_and_the_engine_all_of_them() -> None:
    engine_files = set(ENGINE_DIR.glob("*.py"))
    assert not _files(*CPU_ROOTS) & engine_files
    assert _files(engine.ENGINES["cuda"]) >= engine_files


def test_only_the_engine_imports_the_engine() -> None:
    """No import statement outside `cuda/` (at module level or in a function) names the engine:
    the seam reaches it by a string."""
    package = engine.ENGINES["cuda"]
    naming = []
    for path in sorted((ROOT / "orchestry").rglob("*.py")):
        if ENGINE_DIR in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(n == package or n.startswith(package + ".") for n in names):
                naming.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not naming


def test_the_engine_exports_what_the_seam_calls() -> None:
    cuda = engine.cuda_engine()
    assert cuda.__name__ == engine.ENGINES["cuda"]
    for name in cuda.__all__:
        assert hasattr(cuda, name), name
