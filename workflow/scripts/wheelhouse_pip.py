"""pip and the wheels it handles, shared by build and install: running pip and reading what it
could not find, a wheel file's name and requirements (Wheel), sha256, the manifest's file name,
and the requirement check (pip's vendored `packaging`, run in a subprocess).
"""

from __future__ import annotations

import email.parser
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from wheelhouse_pins import Failure, canonical

MANIFEST = "MANIFEST.txt"


# --------------------------------------------------------------------------- pip


def pip(
    *args: str, timeout: float | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        raise Failure(f"pip {args[0]} ran past {timeout:.0f} s: {' '.join(args)}") from e


def tail(proc: subprocess.CompletedProcess, n: int = 25) -> str:
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return "\n".join("    " + line for line in lines[-n:])


def unfound(proc: subprocess.CompletedProcess) -> set[str]:
    """Normalized names pip said it could not find (`No matching distribution found for X==1`)."""
    text = proc.stdout + proc.stderr
    found = re.findall(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)", text)
    found += re.findall(
        r"Could not find a version that satisfies the requirement ([A-Za-z0-9][A-Za-z0-9._-]*)",
        text,
    )
    return {canonical(name) for name in found}


@dataclass(frozen=True)
class Wheel:
    path: Path

    @property
    def parts(self) -> list[str]:
        return self.path.name[: -len(".whl")].split("-")

    @property
    def key(self) -> str:
        return canonical(self.parts[0])

    @property
    def version(self) -> str:
        return self.parts[1]

    @property
    def pure(self) -> bool:
        py, abi, plat = self.parts[-3:]
        return abi == "none" and plat == "any" and all(t.startswith("py") for t in py.split("."))

    def metadata(self):
        with zipfile.ZipFile(self.path) as z:
            name = next(
                (n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None
            )
            if name is None:
                raise Failure(f"{self.path.name}: no .dist-info/METADATA inside: not a wheel")
            return email.parser.Parser().parsestr(z.read(name).decode("utf-8", "replace"))

    def requires(self) -> list[str]:
        return self.metadata().get_all("Requires-Dist") or []


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- checking requirements

# Run in a subprocess so that this script stays standard library only: it uses the `packaging` that
# pip vendors to evaluate specifiers and markers. Input (stdin, JSON): env (markers, or null for this
# interpreter), dists {name: [version, [Requires-Dist]]}, roots (whose requirements to check),
# assumed (names taken as present: the node's own packages). Output: a JSON list of problems, each
# [message, name of the missing package or null, its specifier].
CHECKER = r"""
import json, sys
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
from pip._vendor.packaging.version import Version, InvalidVersion
job = json.load(sys.stdin)
env, dists, assumed = job["env"], job["dists"], set(job["assumed"])
problems, seen = [], set()

def applies(req, extra):
    if req.marker is None:
        return True
    environment = dict(env or {})
    environment["extra"] = extra
    return req.marker.evaluate(environment)

def check(owner, extras):
    if (owner, extras) in seen:
        return
    seen.add((owner, extras))
    version, requires = dists[owner]
    for text in requires:
        req = Requirement(text)
        if not any(applies(req, x) for x in ("", *extras)):
            continue
        name = canonicalize_name(req.name)
        shown = str(req).split(";")[0]
        if name not in dists:
            if name not in assumed:
                problems.append([f"{owner} {version} needs {shown}: missing", name, str(req.specifier)])
            continue
        have = dists[name][0]
        try:
            ok = req.specifier.contains(Version(have), prereleases=True)
        except InvalidVersion:
            ok = True
        if not ok:
            problems.append([f"{owner} {version} needs {shown}: found {name} {have}", None, ""])
        if req.extras:
            check(name, tuple(sorted(canonicalize_name(x) for x in req.extras)))

for root in job["roots"]:
    check(root, ())
json.dump(problems, sys.stdout)
"""


def requirement_problems(
    dists: dict[str, tuple[str, list[str]]],
    roots: list[str],
    assumed: set[str],
    env: dict[str, str] | None,
) -> list[tuple[str, str | None, str]]:
    job = {"env": env, "dists": dists, "roots": roots, "assumed": sorted(assumed)}
    proc = subprocess.run(
        [sys.executable, "-c", CHECKER], input=json.dumps(job), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise Failure(f"checking requirements failed:\n{tail(proc)}")
    return [tuple(p) for p in json.loads(proc.stdout)]
