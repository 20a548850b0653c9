"""The CLI's commands beside the stages: `schema`, `params-doc`, `deps`, `show` and `serve`.

They write documents derived from the code (the params schema and reference, dvc.yaml's code
dependencies) or render episodes in the terminal. `cli.py` imports this module only when one of them is
asked for, so no stage's code closure holds it (orchestry/bookkeeping/code_deps.py `CLI_COMMANDS`): editing the
params reference generator does not rerun the pipeline.
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
    from pathlib import Path

    from orchestry.params import ParamsError, load_params

    log = logging.getLogger("orchestry.serve")
    params_file = args.serve_params or args.params
    try:
        params = load_params(params_file)
    except ParamsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
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
    from orchestry.serve.app import build_app, run_server
    from orchestry.serve.batcher import BatchSettings
    from orchestry.serve.models import Served
    from orchestry.stages import from_params

    try:
        settings = BatchSettings(args.max_batch, args.max_queue, args.batch_wait_ms / 1000)
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

    def reseed(seed: int) -> None:
        """The policy's next generate call samples from `seed` alone (TeamPolicy._call_seed)."""
        policy.seed, policy.generate_calls = seed, 0

    served = Served(policy, params.model.agents, env, args.team_name if team else None, reseed)
    app = build_app(served, settings, from_params.sampling_spec(params), args.max_tokens_limit)
    run_server(app, args.host, args.port)
    return 0
