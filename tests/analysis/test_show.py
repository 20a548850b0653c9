"""`python -m orchestry show`: episodes of real rollouts and generations rendered as text.

The fixture holds real rows: six of a training run's results/train/rollouts.jsonl, then four of the
trained team's results/evaluate/generations.jsonl. The snapshot is the best episode rendered at a fixed
width without colour; after an intended change of the rendering (or of rich), regenerate it with
`UPDATE_SNAPSHOTS=1 pytest tests/analysis/test_show.py` and review the diff.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from orchestry.analysis import show
from orchestry.analysis.show import Episode, ShowError

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "rollouts_sample.jsonl"
SNAPSHOT = DATA / "show_best.txt"


def _text_console(width: int = 100) -> Console:
    return Console(
        file=io.StringIO(), record=True, width=width, color_system=None, force_terminal=False
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestry", "show", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    return show.load_episodes(SAMPLE)


def test_the_fixture_is_real_rollouts_and_generations(episodes):
    rows = [e.row for e in episodes]
    assert (
        sum("step" in r for r in rows) == 6 and sum(r.get("method") == "magrpo" for r in rows) == 4
    )
    assert len({e.value for e in episodes}) >= 6
    assert any(r["first_failure"] for r in rows)
    assert any(r["code"]["aux"].strip() for r in rows)


def test_best_episode_matches_the_text_snapshot(monkeypatch):
    monkeypatch.chdir(ROOT)  # the header names the file as given: keep it relative
    console = _text_console()
    show.show_file(SAMPLE.relative_to(ROOT), "best", console=console)
    # trailing spaces are padding; editors and hooks strip them from the snapshot
    text = "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text, encoding="utf-8")
    assert text == SNAPSHOT.read_text(encoding="utf-8")


def test_an_episode_shows_every_agent_the_reward_and_the_failure(episodes):
    best = show.pick_episodes(episodes, "best", 1)[0]
    console = _text_console()
    show.render(console, [best])
    text = console.export_text()
    for agent, code in best.row["code"].items():
        assert agent in text and code.splitlines()[0] in text
    for component in best.row["reward"]:
        assert component in text
    assert f"tests {best.row['n_passed']}/{best.row['n_tests']}" in text
    assert best.row["first_failure"] in text


def test_best_and_worst_pick_by_return_with_ties_in_file_order(episodes):
    values = [e.value for e in episodes]
    best = show.pick_episodes(episodes, "best", 3)
    assert [e.value for e in best] == sorted(values, reverse=True)[:3]
    worst = show.pick_episodes(episodes, "worst", 2)
    assert [e.value for e in worst] == [0.0, 0.0]
    assert [e.where.rsplit(":", 1)[1] for e in worst] == ["1", "7"]  # a rollout, then a generation


def test_generations_rows_fall_back_to_the_reward_total(episodes):
    generation = next(e for e in episodes if "return" not in e.row)
    assert generation.value == generation.row["reward"]["total"]
    with pytest.raises(ShowError, match="x.jsonl:3: the row has no numeric"):
        _ = Episode({"problem_id": "p"}, "x.jsonl:3").value


def test_random_is_seeded_and_id_keeps_step_and_turn_order(episodes):
    draw = show.pick_episodes(episodes, "random", 4, seed=7)
    assert draw == show.pick_episodes(episodes, "random", 4, seed=7)
    assert len({e.where for e in draw}) == 4
    assert len(show.pick_episodes(episodes, "random", 50, seed=1)) == len(episodes)
    rows = [
        Episode({"problem_id": "p", "step": 2, "turn": 1, "return": 0.0}, "f:1"),
        Episode({"problem_id": "p", "step": 1, "turn": 2, "return": 0.0}, "f:2"),
        Episode({"problem_id": "q", "step": 0, "turn": 1, "return": 0.0}, "f:3"),
        Episode({"problem_id": "p", "step": 1, "turn": 1, "return": 0.0}, "f:4"),
    ]
    picked = show.pick_episodes(rows, "id", 5, problem_id="p")
    assert [e.where for e in picked] == ["f:4", "f:2", "f:1"]
    with pytest.raises(ShowError, match="no row with problem_id 'r'"):
        show.pick_episodes(rows, "id", 1, problem_id="r")


def test_text_episodes_and_prose_render_generically():
    story = Episode(
        {"problem_id": "story/1", "texts": {"writer": "Once upon a time [bold]x[/]."}, "return": 1},
        "s:1",
    )
    assert show.agent_texts(story.row) == {"writer": "Once upon a time [bold]x[/]."}
    assert not show.looks_like_code("Once upon a time.") and show.looks_like_code("def f():\n  1")
    console = _text_console(60)
    show.render(console, [story])
    assert "Once upon a time [bold]x[/]." in console.export_text()  # no markup read from texts


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "the file has no rows"),
        ('{"problem_id": "a", "return": 1}\n{"problem_id": \n', ":2: not a JSON line"),
        ("[1, 2]\n", ":1: expected one JSON object per line, got list"),
    ],
)
def test_unreadable_files_name_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "rows.jsonl"
    path.write_text(content)
    expected = re.escape(f"{path}{message}" if message[0] == ":" else f"{path}: {message}")
    with pytest.raises(ShowError, match=expected):
        show.load_episodes(path)


def test_cli_shows_the_best_episode_without_loading_torch():
    proc = _cli(str(SAMPLE), "--pick", "best", "--width", "100")
    assert proc.returncode == 0, proc.stderr
    assert "coop/digit_sum_filter" in proc.stdout
    probe = (
        "import sys; from orchestry.cli import main; "
        f"assert main(['show', {str(SAMPLE)!r}]) == 0; "
        "assert not {'torch', 'transformers'} & set(sys.modules), 'show imported a model stack'"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_cli_user_errors_are_one_line_and_exit_1(tmp_path):
    missing = tmp_path / "nope.jsonl"
    proc = _cli(str(missing))
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: ") and str(missing) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = _cli(str(SAMPLE), "--id", "coop/unknown")
    assert proc.returncode == 1 and "coop/unknown" in proc.stderr and str(SAMPLE) in proc.stderr
    proc = _cli(str(SAMPLE), "--pick", "id")
    assert proc.returncode == 1 and "--pick id needs --id" in proc.stderr
    proc = _cli(str(SAMPLE), "--id", json.dumps("coop/shout"), "--pick", "best")
    assert proc.returncode == 1 and "--id goes with --pick id" in proc.stderr


def test_tool_calls_are_shown_under_their_agent():
    row = {
        "problem_id": "coop/acronym",
        "return": 1.0,
        "code": {"aux": "def aux(w):\n    return w[:1]", "main": "def acronym(p): ..."},
        "tools": {
            "aux": [
                {"name": "python", "argument": "print(aux('x'))", "result": "<result>x</result>"}
            ],
            "main": [],
        },
    }
    console = _text_console(80)
    show.render(console, [Episode(row, "r:1")])
    out = console.export_text()
    assert "aux · tool call 1: python" in out and "print(aux('x'))" in out
    assert "<result>x</result>" in out and "main · tool call" not in out
