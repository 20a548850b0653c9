"""A tiny CPU run trains end to end with tools on (docs/tools.md): prepare, one train step of the
embedded model, rollout rows carrying each agent's tool calls, shown by `show`."""

import json

import pytest
from conftest import run_in

TOOLS = {
    "enabled": True,
    "names": ["python", "calculator", "examples"],
    "max_calls": 2,
    "max_result_chars": 200,
}


@pytest.mark.slow
def test_training_with_tools_on_runs_end_to_end(tiny_repo):
    repo, write = tiny_repo
    write(
        env={"tools": TOOLS},
        train={"max_steps": 1, "group_size": 2, "checkpoint_every": 1},
        sampling={"max_new_tokens": 20},
    )
    run_in(repo, "python", "-m", "orchestry", "prepare")
    run_in(repo, "python", "-m", "orchestry", "train")
    rollouts = repo / "results/train/rollouts.jsonl"
    rows = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert rows and all(set(r["tools"]) == {"aux", "main"} for r in rows)
    for row in rows:
        for calls in row["tools"].values():
            assert all(set(c) == {"name", "argument", "result"} for c in calls)
    assert any((repo / "results/train/adapters").rglob("*.safetensors"))
    shown = run_in(repo, "python", "-m", "orchestry", "show", str(rollouts), "--pick", "best")
    assert "return" in shown.stdout
