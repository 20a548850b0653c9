"""A stage's share of a GPU it shares (orchestry/agents/lora/card_share.py, issue 56): the setting,
the runner's environment, and on a GPU a generation of more rows than the share holds at once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import ROOT

from orchestry.agents.lora import card_share
from orchestry.bookkeeping.stage_runs import gpu_share_env


def test_no_share_is_the_whole_card(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(card_share.SHARE_VARIABLE, raising=False)
    assert card_share.share() is None
    assert card_share.planned_free(123) == 123


@pytest.mark.parametrize("text", ["0", "1.5", "-0.1", "half", "nan"])
def test_a_share_out_of_range_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv(card_share.SHARE_VARIABLE, text)
    with pytest.raises(ValueError, match=card_share.SHARE_VARIABLE):
        card_share.share()


def test_the_runner_shares_the_card_only_between_gpu_stages() -> None:
    assert gpu_share_env("cpu", 6) == {}
    assert gpu_share_env("cuda", 1) == {}
    shared = gpu_share_env("cuda:0", 6)
    fraction = float(shared[card_share.SHARE_VARIABLE])
    assert fraction == pytest.approx(card_share.CARD_FOR_STAGES / 6, abs=1e-4)
    assert fraction * 6 < 1  # the stages' caps leave room for their CUDA contexts


def test_a_share_set_beforehand_divides_the_card_between_experiments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Several experiments on one card: the share their runner's caller set stays (the runner
    would give each of its own stages 0.8 / jobs of the whole card, as if alone)."""
    monkeypatch.setenv(card_share.SHARE_VARIABLE, "0.05")
    for jobs in (1, 2):
        assert gpu_share_env("cuda", jobs)[card_share.SHARE_VARIABLE] == "0.05"
    assert gpu_share_env("cpu", 2) == {}


GENERATE_IN_A_SHARE = """
import json, torch
from orchestry.agents.base import GenRequest, SamplingSpec
from orchestry.params import load_params
from orchestry.stages.from_params import make_policy
params = load_params("params.yaml")
params = params.model_copy(update={"model": params.model.model_copy(update={"device": "cuda"})})
team = make_policy(params)
sampling = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=64)
task = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
out = team.generate([GenRequest("aux", task, 512), GenRequest("main", task, 512)], sampling)
cap = float(__import__("os").environ["ORCHESTRY_GPU_SHARE"])
total = torch.cuda.get_device_properties(0).total_memory
print(json.dumps({"rows": [len(g.texts) for g in out],
                  "reserved": torch.cuda.max_memory_reserved(), "cap": cap * total}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a share of a GPU")
def test_a_generation_larger_than_the_share_is_decoded_in_chunks_within_it() -> None:
    """1,024 rows of 64 new tokens need ~13 GB by the decoder's estimate; a share of 3% of an
    H200 (~4 GB) decodes them in chunks, its allocator never past the share. Before the share
    existed the decoder made one 1,024-row batch: past the share, or out of memory under its cap."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, card_share.SHARE_VARIABLE: "0.03", "PYTHONPATH": path}
    code = textwrap.dedent(GENERATE_IN_A_SHARE)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["rows"] == [512, 512]
    assert result["reserved"] <= result["cap"]
