"""`wheelhouse.py install`: the manifest read and its hashes checked, the requirements the
wheelhouse and the interpreter leave unmet, and pip install --no-index (into the interpreter,
or --target a folder).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from wheelhouse_pins import EMBEDDED, PROJECT, BadArgument, Failure, canonical
from wheelhouse_pip import MANIFEST, Wheel, pip, requirement_problems, sha256, tail, unfound


@dataclass(frozen=True)
class Entry:
    key: str
    version: str
    sha256: str
    file: str

    @property
    def spec(self) -> str:
        return f"{self.key}=={self.version}"


def read_manifest(folder: Path) -> list[Entry]:
    path = folder / MANIFEST
    if not folder.is_dir():
        raise BadArgument(f"--from {folder}: no such folder")
    if not path.is_file():
        raise BadArgument(
            f"--from {folder}: no {MANIFEST}, so not a wheelhouse (make one with `build`)"
        )
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"(\S+)==(\S+) ([0-9a-f]{64}) (\S+\.whl)", line.strip())
        if not m:
            raise BadArgument(f"{path}:{number}: not `name==version sha256 file`: {line!r}")
        entries.append(Entry(*m.groups()))
    bad = []
    for e in entries:
        wheel = folder / e.file
        if not wheel.is_file():
            bad.append(f"{e.file} (missing)")
        elif sha256(wheel) != e.sha256:
            bad.append(f"{e.file} (sha256 differs from {MANIFEST}: damaged in transit?)")
    if bad:
        raise Failure(f"{folder}: " + "; ".join(bad))
    return entries


def installed(paths: list[str]) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, requirements) of the distributions on `paths` (the first one found wins)."""
    dists: dict[str, tuple[str, list[str]]] = {}
    for dist in importlib.metadata.distributions(path=paths):
        name = dist.metadata["Name"]
        if name and canonical(name) not in dists:
            dists[canonical(name)] = (dist.version, list(dist.requires or []))
    return dists


def run_pip_install(args: list[str], what: str, problems: list[str]) -> None:
    print(f"  pip install {what}", flush=True)
    proc = pip("install", *args)
    if proc.returncode != 0:
        missing = sorted(unfound(proc))
        raise Failure(
            f"pip install {what} failed"
            + (f"; not in the wheelhouse: {', '.join(missing)}" if missing else "")
            + "".join(f"\n  {p}" for p in problems)
            + f"\npip said:\n{tail(proc)}"
        )


def unmet(dists: dict[str, tuple[str, list[str]]], roots: list[str]) -> list[str]:
    return [message for message, _, _ in requirement_problems(dists, roots, set(), None)]


UNMET = "requirements not met by the wheelhouse nor by what the interpreter has:"


def cmd_install(args: argparse.Namespace) -> int:
    folder = Path(args.from_).resolve()
    entries = read_manifest(folder)
    embedded_key = canonical(EMBEDDED[0])
    project = next((e for e in entries if e.key == PROJECT), None)
    embedded = next((e for e in entries if e.key == embedded_key), None)
    rest = [e for e in entries if e.key != embedded_key]
    roots = [e.key for e in rest]
    extras = f"[{args.extras}]" if args.extras else ""
    if args.extras and project is None:
        raise BadArgument(
            f"--extras {args.extras}: {folder} has no {PROJECT} wheel (built --no-project)"
        )
    target = Path(args.target).resolve() if args.target else None
    print(
        f"wheelhouse: installing from {folder} into {target or sys.prefix} ({sys.executable})",
        flush=True,
    )

    # Before installing: the wheelhouse's packages over what the interpreter (and T) already has.
    # Where every wheel goes in (--target, or a wheelhouse without the project), a requirement that
    # neither meets stops the install before it starts.
    paths = [str(target), *sys.path] if target else list(sys.path)
    planned = installed(paths)
    for e in entries:
        planned[e.key] = (e.version, Wheel(folder / e.file).requires())
    problems = unmet(planned, roots)
    if problems and (target is not None or project is None):
        raise Failure("nothing installed; " + UNMET + "".join(f"\n  {p}" for p in problems))

    base = ["--no-index", "--find-links", str(folder), "--disable-pip-version-check"]
    if target is not None:
        # pip --target ignores what the interpreter has (torch, the image's packages), so it could not
        # resolve against them: every wheel goes in --no-deps, checked above and below
        files = [str(folder / e.file) for e in entries]
        run_pip_install(
            [*base, "--no-deps", "--upgrade", "--target", str(target), *files],
            f"{len(files)} wheels --no-deps --target {target}",
            problems,
        )
    else:
        if project is not None:
            run_pip_install(
                [*base, f"{PROJECT}{extras}=={project.version}"],
                f"{PROJECT}{extras} (its dependencies from the wheelhouse)",
                problems,
            )
        else:
            run_pip_install([*base, *[e.spec for e in rest]], f"{len(rest)} packages", problems)
        if embedded is not None:
            run_pip_install(
                [*base, "--no-deps", embedded.spec], f"{embedded.spec} --no-deps", problems
            )

    dists = installed(paths)
    must_have = entries if (target is not None or project is None) else [project, embedded]
    problems = [f"{e.spec}: not installed" for e in must_have if e and e.key not in dists]
    roots = [key for key in roots if key in dists]
    problems += unmet(dists, roots)
    if problems:
        raise Failure("installed, but " + UNMET + "".join(f"\n  {p}" for p in problems))
    print(f"wheelhouse: installed; the requirements of {len(roots)} packages are met")
    if target is not None:
        print(f"  use it with: export PYTHONPATH={target}${{PYTHONPATH:+:$PYTHONPATH}}")
    return 0
