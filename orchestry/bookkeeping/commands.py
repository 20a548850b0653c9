"""The CLI's commands beside the stages: `schema`, `params-doc`, `deps`, `show` and `serve`.

They write documents derived from the code (the params schema and reference, the stages' code
fingerprints), render episodes in the terminal or serve the team. `cli.py` hands a command's argv here
and imports this module only then, so no stage's code closure holds it (bookkeeping/code_deps.py
`CLI_COMMANDS`): editing a command reruns no stage.
"""

from __future__ import annotations

import argparse
import sys

from orchestry import paths
from orchestry.bookkeeping import code_deps
from orchestry.bookkeeping.params_doc import (
    first_difference,
    json_schema_text,
    with_params_reference,
)
from orchestry.cli import global_options, setup_logging


def main(argv: list[str]) -> int:
    """`python -m orchestry [--params F] [--log F] <command> ...` (cli.main hands commands here)."""
    args = build_parser().parse_args(argv)
    setup_logging(args.log)
    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = global_options(
        argparse.ArgumentParser(prog="python -m orchestry", description=__doc__.splitlines()[0])
    )
    _add_command_parsers(parser.add_subparsers(dest="stage", required=True))
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
        help="write each stage's code fingerprint (results/fingerprints/<stage>.txt) for params.yaml",
    )
    deps.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming the stale fingerprints",
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
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=1 << 20,
        help="the largest request body; larger ones get 413 unread (default: 1048576)",
    )
    serve.add_argument(
        "--api-key",
        default=None,
        help="requests need `Authorization: Bearer KEY` (default: the ORCHESTRY_API_KEY "
        "environment variable, which keeps the key out of the process list; unset: no key)",
    )


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
    if args.stage == "serve":
        return _serve(args)
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
    """Write each stage's fingerprint for params.yaml (with --check: say which is stale)."""
    from orchestry.bookkeeping import fingerprint
    from orchestry.params import ParamsError, load_params

    try:
        params = load_params()
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if check:
        stale = [
            str(fingerprint.path(s))
            for s in code_deps.STAGES
            if not fingerprint.path(s).is_file()
            or fingerprint.path(s).read_text() != fingerprint.fingerprint(s, params)
        ]
        if stale:
            print(
                f"error: stale: {', '.join(stale)}; run `python -m orchestry deps`", file=sys.stderr
            )
            return 1
        return 0
    for written in fingerprint.write_all(params):
        print(f"wrote {written}")
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


def _serve(args: argparse.Namespace) -> int:
    """`python -m orchestry serve`: the params' model with the adapters of `--adapters`, the team
    (when env.name is code) and each agent over HTTP (orchestry/serve, docs/serving.md)."""
    import logging
    import os
    from collections.abc import Iterator
    from contextlib import contextmanager
    from pathlib import Path

    from orchestry.params import ParamsError, load_params

    log = logging.getLogger("orchestry.serve")
    params_file = args.serve_params or args.params
    try:
        params = load_params(params_file)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from orchestry.serve.auth import KEY_ENV, open_bind_warning

    api_key = args.api_key or os.environ.get(KEY_ENV) or None
    if warning := open_bind_warning(args.host, api_key):
        log.warning(warning)
    adapters = Path(args.adapters)
    if not (adapters / "policy.json").is_file():
        print(
            f"error: --adapters {adapters}: no policy.json there; give the adapters folder a stage "
            f"wrote (the train stage's is {paths.ADAPTERS}: dvc repro train)",
            file=sys.stderr,
        )
        return 1
    # here, not at the top: the model stack loads only for the server
    from orchestry.agents.lora.base_model import ModelUnavailable
    from orchestry.serve.app import RequestLimits, build_app, run_server
    from orchestry.serve.batcher import BatchSettings
    from orchestry.serve.models import Served
    from orchestry.stages import from_params

    try:
        settings = BatchSettings(args.max_batch, args.max_queue, args.batch_wait_ms / 1000)
        if args.max_tokens_limit < 1 or args.max_body_bytes < 1:
            raise ValueError("--max-tokens-limit and --max-body-bytes must be at least 1")
        log.info("loading %s with the adapters of %s", params.model.name, adapters)
        policy = from_params.make_policy(params)
        policy.load_adapters(adapters)
    except (ValueError, FileNotFoundError, ModelUnavailable) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    team = params.env.name == "code"
    if not team:
        log.info(
            "env.name is %s: no team model (it answers code tasks); agents only", params.env.name
        )
    env = from_params.make_env(params, training=False) if team else None

    @contextmanager
    def seeded(seed: int) -> Iterator[None]:
        """The policy's generate calls inside sample from `seed` alone (TeamPolicy._call_seed);
        after, its own stream goes on where it was, as if the seeded request never ran."""
        stream = policy.seed, policy.generate_calls
        policy.seed, policy.generate_calls = seed, 0
        try:
            yield
        finally:
            policy.seed, policy.generate_calls = stream

    def prompt_tokens(agent: str, messages: list[dict[str, str]]) -> int:
        return len(policy.prompt_ids(agent, messages))

    def context(agent: str) -> int | None:
        """The most tokens the agent's base model reads at once (its positions)."""
        config = policy.peft_model(agent).get_base_model().config
        return getattr(config, "max_position_embeddings", None)

    contexts = [c for c in map(context, params.model.agents) if c]
    served = Served(
        policy,
        params.model.agents,
        env,
        args.team_name if team else None,
        seeded,
        prompt_tokens,
        min(contexts) if contexts else None,
    )
    limits = RequestLimits(args.max_tokens_limit, args.max_body_bytes)
    app = build_app(served, settings, from_params.sampling_spec(params), limits, api_key)
    run_server(app, args.host, args.port)
    return 0
