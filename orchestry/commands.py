"""The CLI's commands beside the stages: `schema`, `params-doc`, `deps` and `show`.

They write documents derived from the code (the params schema and reference, dvc.yaml's code
dependencies) or render episodes in the terminal. `cli.py` imports this module only when one of them is
asked for, so no stage's code closure holds it (orchestry/code_deps.py `CLI_COMMANDS`): editing the
params reference generator does not rerun the pipeline.
"""

from __future__ import annotations

import argparse
import sys

from orchestry import code_deps, paths
from orchestry.params_doc import first_difference, json_schema_text, with_params_reference


def run(args: argparse.Namespace) -> int:
    """Run the command `args.stage` names; the exit status."""
    if args.stage == "schema":
        paths.PARAMS_SCHEMA.parent.mkdir(parents=True, exist_ok=True)
        paths.PARAMS_SCHEMA.write_text(json_schema_text())
        return 0
    if args.stage == "params-doc":
        return _params_doc(args.check)
    if args.stage == "deps":
        return _deps(args.check)
    return _show(args)


def _params_doc(check: bool) -> int:
    doc = paths.PARAMS_DOC
    try:
        current = doc.read_text()
        wanted = with_params_reference(current)
    except (OSError, ValueError) as err:
        print(f"error: {doc}: {err}", file=sys.stderr)
        return 1
    if not check:
        doc.write_text(wanted)
        return 0
    stale = first_difference(current, wanted)
    if stale:
        print(
            f"error: {doc} params reference is stale at {stale}; run `python -m orchestry params-doc`",
            file=sys.stderr,
        )
        return 1
    return 0


def _deps(check: bool) -> int:
    for path in code_deps.DVC_FILES:
        current = path.read_text()
        try:
            wanted = code_deps.with_stage_code(current)
        except ValueError as err:
            print(f"error: {path}: {err}", file=sys.stderr)
            return 1
        if wanted == current:
            continue
        if check:
            stale = code_deps.first_stale_stage(current, wanted)
            print(
                f"error: {path}: stage {stale} lists other code than its import closure; "
                "run `python -m orchestry deps`",
                file=sys.stderr,
            )
            return 1
        path.write_text(wanted)
    return 0


def _show(args: argparse.Namespace) -> int:
    # imported here: rich loads only for the viewer
    from orchestry.analysis import show

    pick = args.pick or ("id" if args.problem_id is not None else "best")
    try:
        show.show_file(args.file, pick, args.n, args.seed, args.problem_id, args.width)
    except show.ShowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
