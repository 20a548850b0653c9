"""The CLI's commands beside the stages: `schema`, `params-doc`, `deps`, `show` and `serve`.

They write documents derived from the code (the params schema and reference, the stages' code
fingerprints), render episodes in the terminal or serve the team. `cli.py` hands a command's argv here
and imports this module only then, so no stage's code closure holds it (bookkeeping/code_deps.py
`CLI_COMMANDS`): editing a command reruns no stage.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from orchestry import paths
from orchestry.bookkeeping import code_deps
from orchestry.bookkeeping.params_doc import (
    first_difference,
    json_schema_text,
    with_params_reference,
)
from orchestry.cli import global_options, setup_logging

if TYPE_CHECKING:
    from orchestry.params import Params


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
        "--server-tools",
        action="store_true",
        help="run the team's own tools (params env.tools: python, calculator, examples) on this "
        "server, each call in an isolated box outside the batching worker; needed when "
        "env.tools.enabled, refused when the box cannot be built (docs/serving.md)",
    )
    serve.add_argument(
        "--tool-workers",
        type=int,
        default=2,
        help="with --server-tools, most tool calls run at once (default: 2)",
    )
    serve.add_argument(
        "--api-key",
        default=None,
        help="requests need `Authorization: Bearer KEY` (default: the ORCHESTRY_API_KEY "
        "environment variable, which keeps the key out of the process list; unset: no key)",
    )
    serve.add_argument(
        "--allowed-hosts",
        default="",
        help="comma-separated Host names answered beside localhost, 127.0.0.1, ::1 and --host "
        "(with --host 0.0.0.0 or ::, any IP address too); '*.example.com' a domain, '*' any; "
        "another Host gets 400 (default: none more)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="most connections answered at once; a request on one more gets 503 (default: 512)",
    )
    serve.add_argument(
        "--header-timeout-s",
        type=float,
        default=10.0,
        help="a request's head must arrive within this; later: 408 (default: 10)",
    )
    serve.add_argument(
        "--body-timeout-s",
        type=float,
        default=30.0,
        help="a request's body must arrive within this of its head; later: 408 (default: 30)",
    )
    serve.add_argument(
        "--keep-alive-s",
        type=float,
        default=5.0,
        help="an idle keep-alive connection closes after this (default: 5)",
    )
    serve.add_argument(
        "--shutdown-timeout-s",
        type=float,
        default=20.0,
        help="on SIGTERM or Ctrl-C, how long accepted requests may still take before they are "
        "cancelled (default: 20)",
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
    if (problem := _server_tools_problem(args, params)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    # here, not at the top: the model stack loads only for the server
    from orchestry.agents.lora.base_model import ModelUnavailable
    from orchestry.serve import lora_policy
    from orchestry.serve.app import RequestLimits, build_app
    from orchestry.serve.batcher import BatchSettings
    from orchestry.serve.models import Served
    from orchestry.serve.tool_box import run_in_box
    from orchestry.serve.transport import AllowedHosts, ConnectionLimits, run_server
    from orchestry.stages import from_params

    try:
        settings = BatchSettings(
            args.max_batch, args.max_queue, args.batch_wait_ms / 1000, args.tool_workers
        )
        connections = ConnectionLimits(
            args.header_timeout_s,
            args.body_timeout_s,
            args.max_connections,
            args.keep_alive_s,
            args.shutdown_timeout_s,
            AllowedHosts.for_server(args.host, args.allowed_hosts.split(",")),
        )
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
    agents = params.model.agents
    lora_policy.read_text_prompts(policy)  # /v1/completions: plain text, no chat template
    served = Served(
        policy,
        agents,
        env,
        args.team_name if team else None,
        lora_policy.seeding(policy),
        lora_policy.prompt_length(policy),
        lora_policy.context(policy, agents),
        streaming=lora_policy.token_streaming(policy, agents),
        decode=lora_policy.token_decoder(policy),
        text_prompts=True,
        min_prompt_tokens=lora_policy.MIN_PROMPT_TOKENS,
        run_tool=run_in_box if args.server_tools else None,
    )
    limits = RequestLimits(args.max_tokens_limit, args.max_body_bytes)
    sampling = from_params.sampling_spec(params)
    app = build_app(served, settings, sampling, limits, api_key, connections.shutdown_timeout_s)
    run_server(app, args.host, args.port, connections)
    return 0


def _server_tools_problem(args: argparse.Namespace, params: Params) -> str | None:
    """Why the server must not start as asked with (or without) --server-tools, or None: the
    team's tools run only with the flag, and only in a box that isolates them."""
    tools_on = params.env.name == "code" and params.env.tools.enabled
    if tools_on and not args.server_tools:
        return (
            "params env.tools.enabled: the team calls its tools (python runs code) while it "
            "answers; start the server with --server-tools to run them in the isolated box, or "
            "serve params with env.tools.enabled: false"
        )
    if not args.server_tools:
        return None
    if not tools_on:
        return "--server-tools: the params turn no team tools on (env.name code, env.tools.enabled)"
    if args.tool_workers < 1:
        return "--tool-workers must be at least 1"
    from orchestry.serve.tool_box import BoxUnavailable, check_box

    try:
        check_box()
    except BoxUnavailable as err:
        return f"--server-tools: the tools cannot be isolated here: {err}"
    return None
