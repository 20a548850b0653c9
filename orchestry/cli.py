"""`python -m orchestry <stage>`: the one way every stage runs (DVC, Snakemake and the tests use it).

The CLI validates params.yaml once, then calls the stage module's `run`; `schema`, `params-doc`,
`deps`, `show` (episodes of a rollouts/generations file, in the terminal) and `serve` (the trained team
over HTTP, docs/serving.md) are commands beside the stages (orchestry/bookkeeping/commands.py, imported only when
one is asked for).
Errors a user can fix (bad params, a missing input or model, an unavailable sandbox, the API budget)
print one line and exit non-zero; a bad params file exits 2 before anything is written.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

from orchestry import paths
from orchestry.bookkeeping import fingerprint
from orchestry.bookkeeping.code_deps import STAGES  # every stage, in pipeline order
from orchestry.params import BASELINE_NAMES, ParamsError, load_params

COMMANDS = ("schema", "params-doc", "deps", "show", "serve")  # orchestry/bookkeeping/commands.py


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions whose message is the whole story; anything else keeps its traceback."""
    errors: list[type[BaseException]] = [FileNotFoundError]
    for module, name in [
        ("orchestry.agents.lora.base_model", "ModelUnavailable"),
        ("orchestry.envs.code.sandbox.job", "SandboxUnavailable"),
        ("orchestry.agents.claude.client", "MissingApiKey"),
        ("orchestry.agents.claude.client", "BudgetExceeded"),
        ("orchestry.agents.claude.client", "ClaudeCallFailed"),
        ("orchestry.algos.failure", "TrainingFailed"),
    ]:
        mod = sys.modules.get(module)
        if mod is not None and hasattr(mod, name):
            errors.append(getattr(mod, name))
    return tuple(errors)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--params", default="params.yaml", help="params file (default: params.yaml)"
    )
    parser.add_argument("--log", default=None, help="also write the stage's log to this file")
    sub = parser.add_subparsers(dest="stage", required=True)
    for stage in STAGES:
        p = sub.add_parser(stage)
        if stage == "baseline":
            p.add_argument("--name", required=True, choices=BASELINE_NAMES)
    _add_command_parsers(sub)
    return parser


def _add_command_parsers(sub: argparse._SubParsersAction) -> None:
    """The parsers of the commands beside the stages (run by orchestry/bookkeeping/commands.py)."""
    sub.add_parser("schema", help=f"write {paths.PARAMS_SCHEMA} from the params schema")
    doc = sub.add_parser(
        "params-doc",
        help=f"write the params reference of {paths.PARAMS_DOC} from the params schema",
    )
    doc.add_argument(
        "--check",
        action="store_true",
        help=f"write nothing; exit 1 naming the first differing line if {paths.PARAMS_DOC} is stale",
    )
    deps = sub.add_parser(
        "deps",
        help="write each stage's code dependencies (its import closure) into the dvc.yaml files",
    )
    deps.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming the first stage whose listed code differs",
    )
    show = sub.add_parser("show", help="render episodes of a rollouts/generations file")
    show.add_argument(
        "file",
        nargs="?",
        default=str(paths.ROLLOUTS),
        help=f"JSONL rows (default: {paths.ROLLOUTS})",
    )
    show.add_argument(
        "--pick",
        default=None,
        help="best or worst (by return), random (--seed) or id (--id); default: id with --id, else best",
    )
    show.add_argument("--id", dest="problem_id", default=None, help="rows of this problem id")
    show.add_argument("-n", type=int, default=1, help="how many episodes (default: 1)")
    show.add_argument("--seed", type=int, default=0, help="seed of --pick random (default: 0)")
    show.add_argument("--width", type=int, default=None, help="columns (default: the terminal's)")
    _add_serve_parser(sub)


def _add_serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve", help="the trained team and its agents over an OpenAI-compatible HTTP server"
    )
    serve.add_argument(
        "--params",
        dest="serve_params",
        default=None,
        help="params file of the model, agents and sampling defaults (default: the global --params)",
    )
    serve.add_argument(
        "--adapters",
        default=str(paths.ADAPTERS),
        help=f"the agents' adapters, a stage's output folder (default: {paths.ADAPTERS})",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port; 0 = any free (default: 8000)")
    serve.add_argument("--team-name", default="team", help="the team's model name (default: team)")
    serve.add_argument(
        "--max-batch", type=int, default=16, help="most requests per generate call (default: 16)"
    )
    serve.add_argument(
        "--max-queue",
        type=int,
        default=256,
        help="most waiting requests; more get 429 (default: 256)",
    )
    serve.add_argument(
        "--batch-wait-ms",
        type=float,
        default=10.0,
        help="how long a batch waits for more requests once one waits (default: 10)",
    )
    serve.add_argument(
        "--max-tokens-limit",
        type=int,
        default=1024,
        help="the most max_tokens a request may ask for (default: 1024)",
    )


def setup_logging(log_file: str | None) -> None:
    """Stage messages go to stderr and, with --log, to a file (the Snakemake rule's `log:`)."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, mode="w"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", handlers=handlers
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log)
    if args.stage in COMMANDS:
        from orchestry.bookkeeping import commands  # here: no stage's code closure holds it

        return commands.run(args)
    try:
        params = load_params(args.params)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    before = set(sys.modules)
    fingerprint.write_all(params, [args.stage])  # the code this run is (DVC wrote it already)
    module = importlib.import_module(f"orchestry.stages.{args.stage}")
    extra = {"name": args.name} if args.stage == "baseline" else {}
    try:
        module.run(params, **extra)
        fingerprint.check_loaded(args.stage, before)  # it ran no code its fingerprint misses
    except (*_user_errors(), fingerprint.StaleFingerprint) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
