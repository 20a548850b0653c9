"""`python -m orchestry.bookkeeping.reports_index [--check]`: reports/README.md, every experiment from its manifest.

One row per folder of reports/: what it is (the first comment line of its last config file), the
command that makes it, the commit and date of its manifest, headline numbers (the team's held-out
return beside the best other method's, from its comparison.csv or methods/*.json), and whether it is
current (its producing code's hash equals today's). A folder without a manifest is an error naming it.
`--check` writes nothing and exits 1 when the committed file differs (a test runs it). No stage imports
this module.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from orchestry import paths
from orchestry.bookkeeping import recovered
from orchestry.bookkeeping.provenance import MANIFEST

ROOT = Path(__file__).resolve().parents[2]
INDEX = paths.REPORTS / "README.md"
TEAM = "magrpo"


def first_sentence(lines: list[str]) -> str:
    """The first clause of some prose lines: up to the first full stop or colon outside brackets
    that a space or the end follows."""
    text = " ".join(line.strip() for line in lines)
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and char in ".:" and (i + 1 == len(text) or text[i + 1] == " "):
            return text[:i]
    return text


def description(folder: Path, record: dict[str, Any]) -> str:
    """What a folder is: the first sentence of its first config file's opening comment (or of its
    README), or what made it."""
    for marker in recovered.TOOLS:  # python -m orchestry.eval.ablation / .seeds: its title
        md = folder / marker.replace(".csv", ".md")
        if md.is_file():
            return md.read_text().splitlines()[0].lstrip("# ")
    names = [Path(c).name for c in recovered.configs_in_order(folder)]
    configs = [folder / f"config-{n}" for n in names if (folder / f"config-{n}").is_file()]
    for config in configs:
        comment = []
        for line in config.read_text().splitlines():
            if not line.startswith("#") or line.startswith("#   "):  # a command follows the prose
                break
            comment.append(line.lstrip("#"))
        if any(c.strip() for c in comment):
            others = [n for n in names if folder / f"config-{n}" != config]
            over = f" (with {', '.join(others)} over it)" if others else ""
            return first_sentence(comment) + over
    if (folder / "README.md").is_file():
        prose = (folder / "README.md").read_text().split("\n\n")
        return first_sentence([p for p in prose if p.strip()][0].lstrip("# ").splitlines())
    if "command" in record:
        return f"made by `{record['command']}`"
    return f"the pipeline's `{record.get('stage', folder.name)}` stage"


def method_returns(folder: Path) -> dict[str, float]:
    """Each method's held-out mean return, from comparison.csv or methods/*.json."""
    table = folder / "comparison.csv"
    if table.is_file():
        with table.open() as f:
            return {r["method"]: float(r["return_mean"]) for r in csv.DictReader(f)}
    found = {}
    for path in sorted(folder.glob("methods/*.json")):
        value = json.loads(path.read_text()).get("return_mean")
        if value is not None:
            found[path.stem] = float(value)
    return found


def headline(folder: Path) -> str:
    """The team's return against the best other method's, where the folder has both."""
    returns = method_returns(folder)
    others = {m: r for m, r in returns.items() if m != TEAM}
    parts = []
    if TEAM in returns:
        parts.append(f"return {TEAM} {returns[TEAM]:.3f}")
    if others:
        best = max(others, key=lambda m: others[m])
        parts.append(f"best other {best} {others[best]:.3f}")
    return "; ".join(parts) or "see the folder"


def code_now(record: dict[str, Any], kind: str, name: str, root: Path) -> str | None:
    """The hash a folder's manifest would hold if it were made now. A pipeline stage's manifest
    (`provenance.stage_manifest`) hashes the fingerprint file the stage ran with, so it compares
    with that file today; the others hash their producing code's files."""
    if "stage" in record and "code" in record:
        path = root / paths.FINGERPRINTS / f"{record['stage']}.txt"
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return recovered.today_hash(kind, name)


def row(folder: Path, root: Path) -> str:
    path = folder / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: every folder of reports/ needs its manifest "
            "(python -m orchestry.bookkeeping.recovered writes one from git history)"
        )
    record = json.loads(path.read_text())
    if "code_sha256" not in record:
        raise ValueError(f"{path}: no key 'code_sha256'")
    kind = recovered.kind_of(folder)
    if kind == "pipeline":
        command = recovered.PIPELINE_FOLDERS[folder.name][1]
    else:
        command = record.get("command") or recovered.experiment_command(folder)
    # a pipeline stage's manifest holds no commit: its commit is the git commit holding it
    commit, date = record.get("commit"), record.get("date") or record.get("started")
    if not commit or not date:
        held, committed = recovered.last_change(str(folder.relative_to(root)), root)
        commit, date = commit or held, date or committed
    date = date[:10]
    current = record["code_sha256"] is not None and record["code_sha256"] == code_now(
        record, kind, folder.name, root
    )
    state = "current" if current else "superseded"
    if record.get("recovered"):
        state += " (recovered)"
    cells = [
        f"[`{folder.name}`]({folder.name}/)",
        description(folder, record).replace("|", "/"),
        f"`{command}`",
        f"`{commit[:10]}`",
        date,
        headline(folder),
        state,
    ]
    return "| " + " | ".join(cells) + " |"


def index_text(root: Path = ROOT) -> str:
    """reports/README.md as the manifests say it."""
    folders = sorted(d for d in (root / paths.REPORTS).iterdir() if d.is_dir())
    lines = [
        "# Reports",
        "",
        "Generated by `python -m orchestry.bookkeeping.reports_index` from each folder's `manifest.json`; do not edit",
        "(a test checks it). *Current*: the code that made the folder hashes as today's code does;",
        "*superseded*: the code has changed since (rerun it with its command to refresh it).",
        "*Recovered*: the folder predates manifests, whose record was rebuilt from git history",
        "(docs/provenance.md). Headline: held-out mean return of the team and of the best other method.",
        "",
        "| Folder | What | Command | Commit | Date | Headline | State |",
        "|---|---|---|---|---|---|---|",
        *(row(folder, root) for folder in folders),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m orchestry.bookkeeping.reports_index", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--check", action="store_true", help=f"write nothing; exit 1 if {INDEX} is stale"
    )
    args = parser.parse_args(argv)
    try:
        wanted = index_text()
    except (FileNotFoundError, ValueError, RuntimeError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    target = ROOT / INDEX
    if args.check:
        if not target.is_file() or target.read_text() != wanted:
            print(
                f"error: {INDEX} is stale; run `python -m orchestry.bookkeeping.reports_index`",
                file=sys.stderr,
            )
            return 1
        return 0
    target.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
