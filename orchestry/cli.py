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


def global_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options before the stage or command (the commands' parser takes them too)."""
    parser.add_argument(
        "--params", default="params.yaml", help="params file (default: params.yaml)"
    )
    parser.add_argument("--log", default=None, help="also write the stage's log to this file")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The stages' parser; a command (COMMANDS) is parsed by orchestry/bookkeeping/commands.py."""
    parser = global_options(
        argparse.ArgumentParser(
            prog="python -m orchestry",
            description=__doc__.splitlines()[0],
            epilog=f"commands beside the stages: {', '.join(COMMANDS)} "
            "(python -m orchestry <command> --help)",
        )
    )
    sub = parser.add_subparsers(dest="stage", required=True)
    for stage in STAGES:
        p = sub.add_parser(stage)
        if stage == "baseline":
            p.add_argument("--name", required=True, choices=BASELINE_NAMES)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The first word of `argv` that is not a global option or its value."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--params", "--log"):
            skip = True
        elif not word.startswith("-"):
            return word
    return None


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
    argv = sys.argv[1:] if argv is None else argv
    if command_of(argv) in COMMANDS:
        from orchestry.bookkeeping import commands  # here: no stage's code closure holds it

        return commands.main(argv)
    args = build_parser().parse_args(argv)
    setup_logging(args.log)
    try:
        params = load_params(args.params)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    fingerprint.write_all(params, [args.stage])  # the code this run is (DVC wrote it already)
    module = importlib.import_module(f"orchestry.stages.{args.stage}")
    extra = {"name": args.name} if args.stage == "baseline" else {}
    try:
        module.run(params, **extra)
        fingerprint.check_loaded(args.stage)  # it ran no code its fingerprint misses
    except (*_user_errors(), fingerprint.StaleFingerprint) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
