"""Episodes of a rollouts or generations file rendered in the terminal: `python -m orchestry show`.

A row of `results/train/rollouts.jsonl` (training) or of a method's `generations.jsonl` is one joint
sample: each agent's text (the row's per-agent mapping: `code` for the code environment), the reward's
components, and the tests' outcome. The viewer shows picked rows turn by turn: a header, one panel per
agent in its own colour (code highlighted as Python, prose as plain text), the reward breakdown and the
first failure.

With tools on, a row's `tools` holds each agent's calls (name, argument, result); they are shown
under the agent's panel, in the order made.

A row does not name the earlier-turn sample it continues (the tree branches every node), so an
episode cannot be rebuilt across turns unambiguously: each row is shown as one turn, its `turn` in the
header, and the rows of one problem (`--pick id`) come in (step, turn) order.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

PICKS = ("best", "worst", "random", "id")
# where a row keeps its per-agent texts, first match wins; a plain string is one agent's text
AGENT_TEXT_KEYS = ("code", "texts", "text")
AGENT_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")
# a line that starts a Python statement: the text is shown as code
_CODE_LINE = re.compile(
    r"^\s*(def|class|import|from\s+\S+\s+import|return|if|for|while|with|try|@)\b", re.MULTILINE
)


class ShowError(ValueError):
    """A file or choice the viewer cannot show; the message names the file (and line) and the fix."""


@dataclass(frozen=True)
class Episode:
    """One row of the file and where it came from (`path:line`, for messages and the header)."""

    row: dict[str, Any]
    where: str

    @property
    def problem_id(self) -> str:
        return str(self.row.get("problem_id", "?"))

    @property
    def value(self) -> float:
        """The row's return (training rows), else its reward's total (generations rows)."""
        value = self.row.get("return")
        if value is None and isinstance(self.row.get("reward"), Mapping):
            value = self.row["reward"].get("total")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ShowError(f"{self.where}: the row has no numeric `return` or `reward.total`")
        return float(value)


def load_episodes(path: str | Path) -> list[Episode]:
    """Every row of a JSONL file, each with its line number; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ShowError(
            f"{path}: no such file; train first (`dvc repro train`) or name a generations.jsonl"
        )
    episodes = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ShowError(f"{path}:{number}: not a JSON line ({err.msg})") from err
            if not isinstance(row, dict):
                raise ShowError(
                    f"{path}:{number}: expected one JSON object per line, got {type(row).__name__}"
                )
            episodes.append(Episode(row, f"{path}:{number}"))
    if not episodes:
        raise ShowError(f"{path}: the file has no rows")
    return episodes


def _step_and_turn(episode: Episode) -> tuple[int, int]:
    return int(episode.row.get("step") or 0), int(episode.row.get("turn") or 1)


def pick_episodes(
    episodes: Sequence[Episode],
    pick: str,
    n: int,
    seed: int = 0,
    problem_id: str | None = None,
) -> list[Episode]:
    """`n` episodes: the highest or lowest return (ties in file order), a seeded random draw, or
    the rows of one problem in (step, turn) order."""
    if n < 1:
        raise ShowError(f"-n must be at least 1, got {n}")
    if pick == "best":
        return sorted(episodes, key=lambda e: -e.value)[:n]
    if pick == "worst":
        return sorted(episodes, key=lambda e: e.value)[:n]
    if pick == "random":
        return random.Random(seed).sample(list(episodes), min(n, len(episodes)))
    if pick == "id":
        if problem_id is None:
            raise ShowError("--pick id needs --id PROBLEM_ID")
        chosen = [e for e in episodes if e.problem_id == problem_id]
        if not chosen:
            known = sorted({e.problem_id for e in episodes})
            shown = ", ".join(known[:5]) + (", ..." if len(known) > 5 else "")
            source = episodes[0].where.rsplit(":", 1)[0] if episodes else "the file"
            raise ShowError(f"{source}: no row with problem_id {problem_id!r} (ids there: {shown})")
        return sorted(chosen, key=_step_and_turn)[:n]
    raise ShowError(f"unknown pick {pick!r}; picks are {', '.join(PICKS)}")


def agent_texts(row: Mapping[str, Any]) -> dict[str, str]:
    """The row's per-agent texts, in the row's agent order (files are written with sorted keys)."""
    for key in AGENT_TEXT_KEYS:
        value = row.get(key)
        if isinstance(value, Mapping):
            return {str(agent): "" if text is None else str(text) for agent, text in value.items()}
        if isinstance(value, str):
            return {key: value}
    return {}


def looks_like_code(text: str) -> bool:
    return bool(_CODE_LINE.search(text))


def _body(text: str) -> RenderableType:
    if not text.strip():
        return Text("(empty)", style="dim italic")
    if looks_like_code(text):
        return Syntax(text, "python", theme="ansi_dark", background_color="default", word_wrap=True)
    return Text(text)


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def header(episode: Episode) -> Text:
    """Problem id, where the row sits (step, turn, method, sample), return, tests and correctness."""
    row = episode.row
    text = Text(episode.problem_id, style="bold")
    place = [f"{key} {row[key]}" for key in ("method", "step", "turn", "sample") if key in row]
    if place:
        text.append("  " + " · ".join(place))
    text.append(f"\nreturn {episode.value:.3f}")
    if "n_passed" in row and "n_tests" in row:
        text.append(f"   tests {row['n_passed']}/{row['n_tests']}")
    if "correct" in row:
        correct = bool(row["correct"])
        text.append("   correct ")
        text.append("yes" if correct else "no", style="bold green" if correct else "bold red")
    text.append(f"   ({episode.where})", style="dim")
    return text


def reward_table(reward: Mapping[str, Any]) -> Table:
    """Each reward component, `total` last."""
    table = Table(title="reward", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("component")
    table.add_column("value", justify="right")
    for key in sorted(reward, key=lambda k: (k == "total", k)):
        style = "bold" if key == "total" else ""
        table.add_row(Text(key, style=style), Text(_number(reward[key]), style=style))
    return table


def tool_calls(row: Mapping[str, Any], agent: str, colour: str) -> list[RenderableType]:
    """The agent's tool calls of the row (`tools`), each call and its result."""
    tools = row.get("tools")
    calls = tools.get(agent) if isinstance(tools, Mapping) else None
    if not isinstance(calls, list):
        return []
    shown: list[RenderableType] = []
    for i, call in enumerate(calls, start=1):
        if not isinstance(call, Mapping):
            continue
        name = str(call.get("name", "?"))
        body = Group(_body(str(call.get("argument", ""))), Text(str(call.get("result", "")), "dim"))
        title = Text(f"{agent} · tool call {i}: {name}", style=colour)
        shown.append(Panel(body, title=title, title_align="left", border_style="dim", expand=True))
    return shown


def render_episode(episode: Episode) -> Group:
    """One episode: header, one panel per agent (its own colour), reward breakdown, first failure."""
    row = episode.row
    parts: list[RenderableType] = [header(episode)]
    texts = agent_texts(row)
    if not texts:
        parts.append(Text(f"(no per-agent texts under {' / '.join(AGENT_TEXT_KEYS)})", "dim"))
    for i, (agent, text) in enumerate(texts.items()):
        colour = AGENT_COLOURS[i % len(AGENT_COLOURS)]
        title = Text(agent, style=f"bold {colour}")
        parts.append(
            Panel(_body(text), title=title, title_align="left", border_style=colour, expand=True)
        )
        parts.extend(tool_calls(row, agent, colour))
    if isinstance(row.get("reward"), Mapping) and row["reward"]:
        parts.append(reward_table(row["reward"]))
    if row.get("first_failure"):
        parts.append(Text.assemble(("first failure: ", "bold red"), str(row["first_failure"])))
    if row.get("judge") is not None:
        judge = row["judge"] if isinstance(row["judge"], str) else json.dumps(row["judge"])
        parts.append(Text.assemble(("judge: ", "bold"), judge))
    return Group(*parts)


def render(console: Console, episodes: Sequence[Episode]) -> None:
    for i, episode in enumerate(episodes, start=1):
        console.rule(Text(f"episode {i}/{len(episodes)}"), style="dim")
        console.print(render_episode(episode))


def show_file(
    path: str | Path,
    pick: str = "best",
    n: int = 1,
    seed: int = 0,
    problem_id: str | None = None,
    width: int | None = None,
    console: Console | None = None,
) -> list[Episode]:
    """Load `path`, pick `n` episodes and print them; returns the episodes shown."""
    if problem_id is not None and pick != "id":
        raise ShowError(f"--id goes with --pick id, not --pick {pick}")
    chosen = pick_episodes(load_episodes(path), pick, n, seed, problem_id)
    render(console or Console(width=width), chosen)
    return chosen
