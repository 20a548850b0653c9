"""benchmarks/README.md: short, a section per benchmark script, and every number it cites from a
benchmark record equal to that record.

The README's convention ("Checked numbers" there):

- A Markdown table whose first header cell is a record path in backticks (`results/bench/<name>.json`
  or `<name>.manifest.json`) is checked. In the header's other cells and in each row's first cell the
  last backticked item is a key path (keys joined by `/`, list indices as numbers); a cell without
  one adds nothing to the path. A row whose first cell starts with a record's path reads that
  record. Each other cell shows the value at the row's path joined with the column's (where one of
  them holds `*`, the other replaces it). Empty cells are not checked.
- In prose (a paragraph: lines outside tables, headings and code blocks, up to a blank line), a key
  path in backticks followed by ` = ` and a value (up to `;`, `. `, ` (`, a backtick or the
  paragraph's end) shows the value at that path in the record whose path came last before it in
  the paragraph.
- A value is a number rounded to the decimals it shows (thousands commas and bold allowed),
  `true` / `false`, `—` for null or absent, or a string (a commit may be shown by its first 7 or
  more characters).
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "benchmarks" / "README.md"
MAX_LINES = 250
RECORD = re.compile(r"^results/bench/[\w.-]+\.json$")
NUMBER = re.compile(r"^-?\d+(?:\.(\d+))?$")
ABSENT = object()


def benchmark_scripts() -> list[str]:
    """The scripts under benchmarks/ that run on their own (an `if __name__ == "__main__":` block);
    the others (timed_train.py) are modules they share."""
    return sorted(
        p.name
        for p in (ROOT / "benchmarks").glob("*.py")
        if re.search(r"^if __name__ == .__main__.:", p.read_text(), re.M)
    )


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]*)`", cell)


def key_of(cell: str) -> str:
    """The cell's key path: its last backticked item that is not a record ('' if none)."""
    keys = [t for t in ticked(cell) if not RECORD.match(t)]
    return keys[-1] if keys else ""


def join(row: str, col: str) -> str:
    if "*" in row:
        path = row.replace("*", col)
    elif "*" in col:
        path = col.replace("*", row)
    else:
        path = f"{row}/{col}"
    return "/".join(k for k in path.split("/") if k)


def follow(data: Any, path: str) -> Any:
    for key in [k for k in path.split("/") if k]:
        if isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        elif isinstance(data, dict) and key in data:
            data = data[key]
        else:
            return ABSENT
    return data


def paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text joined by spaces) of every paragraph of prose."""
    out: list[tuple[int, str]] = []
    lines: list[str] = []
    fenced = False
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.startswith("```"):
            fenced = not fenced
        prose = line.strip() and not (fenced or line.startswith(("```", "|", "#")))
        if prose:
            lines.append(line.strip())
        elif lines:
            out.append((number - len(lines), " ".join(lines)))
            lines = []
    return out


def prose_values(text: str) -> list[tuple[int, str, str, str]]:
    """(README line of the paragraph, record, key path, shown value) of every `key` = value."""
    out = []
    for line, para in paragraphs(text):
        record = ""
        for m in re.finditer(r"`([^`]+)`", para):
            if RECORD.match(m.group(1)):
                record = m.group(1)
                continue
            value = re.match(r"\s*=\s*(.*?)(?=;|\. |\s\(|`|$)", para[m.end() :])
            if value:
                out.append((line, record, m.group(1), value.group(1).strip().removesuffix(".")))
    return out


def checked_cells(text: str) -> list[tuple[int, str, str, str]]:
    """(README line, record, key path, shown value) of every checked table cell."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        head = cells(lines[i]) if lines[i].startswith("|") else []
        records = ticked(head[0]) if head else []
        if not (records and RECORD.match(records[0])):
            i += 1
            continue
        cols = [key_of(c) for c in head[1:]]
        i += 2  # the header and its separator
        while i < len(lines) and lines[i].startswith("|"):
            row = cells(lines[i])
            first = ticked(row[0])
            record = first[0] if first and RECORD.match(first[0]) else records[0]
            for col, shown in zip(cols, row[1:], strict=True):
                out.append((i + 1, record, join(key_of(row[0]), col), shown))
            i += 1
    return out


def mismatch(value: Any, shown: str) -> str | None:
    """Why `shown` does not show `value` (None if it does)."""
    shown = shown.replace("**", "").replace("`", "").strip()
    if shown == "—":
        return None if value is None or value is ABSENT else f"is {value!r}, not null"
    if value is ABSENT:
        return "no such key"
    if isinstance(value, str):
        commit = re.fullmatch(r"[0-9a-f]{7,40}", value) and len(shown) >= 7
        return None if value == shown or (commit and value.startswith(shown)) else f"is {value!r}"
    if shown in ("true", "false"):
        return None if value is (shown == "true") else f"is {value!r}"
    number = NUMBER.match(shown.replace(",", ""))
    if not number or isinstance(value, bool) or not isinstance(value, int | float):
        return f"is {value!r}"
    decimals = len(number.group(1) or "")
    if abs(value - float(shown.replace(",", ""))) <= 0.5 * 10**-decimals + 1e-9:
        return None
    return f"is {value!r}, shown rounded to {decimals} decimals"


def sections(text: str) -> dict[str, str]:
    """Each `## ` heading's text and its body."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_LINES, f"benchmarks/README.md has {lines} lines (at most {MAX_LINES})"


def test_every_benchmark_script_has_a_section_with_checked_numbers():
    text = README.read_text()
    scripts = benchmark_scripts()
    assert len(scripts) >= 10, scripts
    for script in scripts:
        bodies = [body for head, body in sections(text).items() if f"`{script}`" in head]
        assert bodies, f"no `## ` section of benchmarks/README.md names `{script}`"
        assert checked_cells(bodies[0]), f"the section of {script} has no checked table"
        assert prose_values(bodies[0]), f"the section of {script} names no manifest's commit"


@pytest.fixture(scope="module")
def cited() -> list[tuple[int, str, str, str]]:
    text = README.read_text()
    found = checked_cells(text) + prose_values(text)
    assert len(found) > 100, "too few checked numbers: is the convention still followed?"
    return found


def test_every_cited_record_exists_and_has_a_manifest(cited):
    records = {record for _, record, _, _ in cited}
    assert "" not in records, "a `key` = value before any record's path in its paragraph"
    for record in sorted(records):
        assert (ROOT / record).is_file(), record
        manifest = record.removesuffix(".manifest.json").removesuffix(".json") + ".manifest.json"
        assert (ROOT / manifest).is_file(), manifest


def test_every_cited_number_equals_its_record(cited):
    data: dict[str, Any] = {}
    wrong = []
    for line, record, path, shown in cited:
        if not shown:
            continue
        if record not in data:
            data[record] = json.loads((ROOT / record).read_text())
        why = mismatch(follow(data[record], path), shown)
        if why:
            wrong.append(f"README line {line}: {record} {path or '(root)'} = {shown!r}: {why}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("value", "shown", "ok"),
    [
        (1.387179, "1.39", True),
        (1.387179, "1.38", False),
        (25272.015, "25,272", True),
        (0.017558, "**0.018**", True),
        (0.5749684, "0.58", False),
        (None, "—", True),
        (ABSENT, "—", True),
        (0.1, "—", False),
        (True, "true", True),
        (True, "1", False),
        ("8abc164", "8abc164", True),
        ("784b8aec94ce94ef9d0c7383ebb2ae8016d33064", "784b8ae", True),
        ("784b8aec94ce94ef9d0c7383ebb2ae8016d33064", "784b8a", False),
        ("NVIDIA H200", "`NVIDIA H200`", True),
        (ABSENT, "1.0", False),
    ],
)
def test_the_convention(value, shown, ok):
    assert (mismatch(value, shown) is None) is ok


def test_prose_is_read_by_the_convention():
    text = "\n".join(
        [
            "Manifest `results/bench/a.manifest.json`: `commit` = 8abc164; `hardware/gpus/0` = H200,",
            "141 GB (two); record `results/bench/a.json`: `x/y` = **1.5**. Then `z` = 2 (a note)",
            "",
            "```bash",
            "`q` = 1",
            "```",
            "Not a pair: `commit` and `w`.",
        ]
    )
    assert prose_values(text) == [
        (1, "results/bench/a.manifest.json", "commit", "8abc164"),
        (1, "results/bench/a.manifest.json", "hardware/gpus/0", "H200, 141 GB"),
        (1, "results/bench/a.json", "x/y", "**1.5**"),
        (1, "results/bench/a.json", "z", "2"),
    ]


def test_a_table_is_read_by_the_convention():
    text = "\n".join(
        [
            "| `results/bench/a.json` | step (`step_seconds`) | plain |",
            "|---|---:|---|",
            "| 3B (`shapes/3b`) | 1.39 | x |",
            "| `results/bench/b.json` other (`runs/*/ok`) | true | |",
            "| `1` | 3 | |",
            "",
            "| not a record | `x` |",
        ]
    )
    assert checked_cells(text) == [
        (3, "results/bench/a.json", "shapes/3b/step_seconds", "1.39"),
        (3, "results/bench/a.json", "shapes/3b", "x"),
        (4, "results/bench/b.json", "runs/step_seconds/ok", "true"),
        (4, "results/bench/b.json", "runs/ok", ""),
        (5, "results/bench/a.json", "1/step_seconds", "3"),
        (5, "results/bench/a.json", "1", ""),
    ]
