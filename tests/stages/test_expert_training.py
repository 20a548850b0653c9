"""2-turn MAGRPO with Claude expert-edits feedback against a local Messages API server, budget included."""

import json
import os
import secrets
import shutil
import sys

import pytest
from conftest import run_in
from fake_anthropic import FakeAnthropicServer, message_reply

pytestmark = pytest.mark.slow  # a real model trains or generates in every test here

KEY = f"sk-ant-test-{secrets.token_hex(16)}"


def expert_reply(body):
    # every expert request gets one suggestion per agent, with a large usage so the budget bites
    return message_reply(
        json.dumps(
            {"aux": "Return a value for every input.", "main": "Call aux and use its result."}
        ),
        input_tokens=2000,
        output_tokens=1000,
        model="claude-haiku-4-5",
    )


def written_files(root):
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts and ".dvc" not in p.parts
    ]


def test_two_turn_expert_edits_training_and_budget_stop(tiny_repo, monkeypatch):
    repo, write = tiny_repo
    with FakeAnthropicServer(KEY) as server:
        server.default = expert_reply
        anthropic = {
            "model": "claude-haiku-4-5",
            "base_url": server.base_url,
            "max_tokens": 1000,
            "budget_usd": 1.0,
        }
        train = {
            "turns": 2,
            "feedback": "expert_edits",
            "max_steps": 2,
            "group_size": 2,
            "checkpoint_every": 1,
        }
        # 32 new tokens: the expert is asked about every turn-1 joint action, parsed or not
        write(train={**train, "max_steps": 1}, anthropic=anthropic, sampling={"max_new_tokens": 32})
        env_key = {"ANTHROPIC_API_KEY": KEY}
        os.environ.update(env_key)
        try:
            run_in(repo, sys.executable, "-m", "orchestry", "prepare")
            run_in(repo, sys.executable, "-m", "orchestry", "train")
            ledger = [
                json.loads(x)
                for x in (repo / "results/train/api_ledger.jsonl").read_text().splitlines()
            ]
            # 1 step x 2 turn-1 joint actions expanded with one expert call each; identical
            # requests (same code from two samples) are answered from the cache without HTTP
            assert len(ledger) == 2
            assert len(server.requests) == sum(not line["cached"] for line in ledger) >= 1
            # the expert saw the problem and the sandbox diagnostics of the node it reviews
            prompts = [json.dumps(r.body) for r in server.requests]
            assert all("Problem:" in p and "The main function" in p for p in prompts)
            rollouts = [
                json.loads(x)
                for x in (repo / "results/train/rollouts.jsonl").read_text().splitlines()
            ]
            assert {r["turn"] for r in rollouts} == {1, 2}

            # a budget that covers two calls: step 1 finishes, step 2 is refused and the stage stops
            for p in (repo / "results/train").iterdir():
                if p.is_file():
                    p.unlink()
            n_before = len(server.requests)
            budget = {**anthropic, "budget_usd": 0.019}
            write(train=train, anthropic=budget, sampling={"max_new_tokens": 32})
            shutil.rmtree(repo / "cache/anthropic", ignore_errors=True)  # no cache hits
            proc = run_in(repo, sys.executable, "-m", "orchestry", "train", check=False)
            assert proc.returncode == 1 and "budget" in proc.stderr.lower()
            assert len(server.requests) - n_before == 2  # the budget pays for exactly two replies
            ledger = [
                json.loads(x)
                for x in (repo / "results/train/api_ledger.jsonl").read_text().splitlines()
            ]
            assert sum(not line["cached"] for line in ledger) == 2
            assert list((repo / "cache/checkpoints").glob("train-*/last/state.pt")), (
                "step 1 is kept"
            )
            assert not (repo / "results/train/metrics.json").exists()
        finally:
            for k in env_key:
                os.environ.pop(k, None)
    for path in written_files(repo):
        assert KEY.encode() not in path.read_bytes(), path
