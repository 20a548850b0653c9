"""`wheelhouse.py build`: pip download of the pinned wheels, the fallbacks for a pin with none
(a pure-python sdist built, else the nearest version with a wheel), the project's own wheel,
the check that the folder meets every wheel's requirements, and the MANIFEST.txt written and
the folder put in place.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from wheelhouse_pins import (
    EMBEDDED,
    PROJECT,
    TORCH_STACK,
    BadArgument,
    Failure,
    Pin,
    Target,
    brought_by_torch,
    parse_target,
    read_lock,
    read_skip,
    this_platform,
    this_python,
)
from wheelhouse_pip import MANIFEST, Wheel, pip, requirement_problems, sha256, tail, unfound

# what `pip freeze` leaves out of every lock; added at the newest version the wheels accept if needed
FREEZE_OMITS = {"setuptools", "wheel", "pip", "distribute"}
# the project files a wheel is built from (copied to a clean folder: no stale build/ leaks in)
PROJECT_FILES = ["pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "README.md", "LICENSE"]
SDIST_BUILD_TIMEOUT = 900
MAX_TRIES = 12  # versions tried, nearest first, for a pin with no wheel for the target


def wheels_in(folder: Path) -> list[Wheel]:
    return sorted((Wheel(p) for p in folder.glob("*.whl")), key=lambda w: w.key)


def release(version: str) -> tuple[int, ...]:
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(x) for x in m.group(0).split(".")) if m else ()


def by_nearness(pinned: str, versions: list[str]) -> list[str]:
    """Releases closest to the pin first: the newer ones upwards, then the older ones downwards."""
    want = release(pinned)
    newer = sorted((v for v in versions if release(v) > want), key=release)
    older = sorted((v for v in versions if release(v) < want), key=release, reverse=True)
    return newer + older


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
