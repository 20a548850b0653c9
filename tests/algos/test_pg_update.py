"""The update step on the real LoRA team: a non-finite loss stops training before any weight moves."""

import os

import pytest
import torch

from orchestry.algos.pg_update import Optimizers, TrainingFailed, update_agents
from orchestry.params import parse_params
from orchestry.stages.from_params import gradient_checkpointing, make_policy, microbatch
from orchestry.stages.train_from_params import optimizer_settings, update_settings


@pytest.fixture(scope="module")
def params():
    # float32: the micro-batches' sum is checked against one batch to 1e-4 (bfloat16, the default,
    # rounds differently for rows padded to different widths)
    return parse_params({"train": {"microbatch": 2}, "model": {"dtype": "float32"}})


def test_a_non_finite_loss_raises_and_leaves_the_adapter_as_it_was(params):
    policy = make_policy(params)
    opts = Optimizers.create(policy, ["aux", "main"], False, optimizer_settings(params), total=4)
    lora_b = next(p for n, p in policy.peft_model("aux").named_parameters() if "lora_B.aux" in n)
    with torch.no_grad():
        lora_b[0, 0] = float("nan")
    before = {id(p): p.detach().clone() for p in policy.trainable_parameters("aux")}
    prompt = policy.prompt_ids("aux", [{"role": "user", "content": "Write aux."}])
    rows = {"aux": [(prompt, [9, 10, 11], 1.0), (prompt, [12, 13], -1.0), (prompt, [14], 0.5)]}
    with pytest.raises(TrainingFailed, match="non-finite loss for adapter aux"):
        update_agents(policy, opts, rows, update_settings(params))
    for p in policy.trainable_parameters("aux"):
        assert torch.equal(p.detach(), before[id(p)]) or torch.isnan(before[id(p)]).any()


def test_micro_batches_add_up_to_the_logged_loss(params):
    """The loss is summed on the device over micro-batches of 2 rows: three rows, two passes."""
    policy = make_policy(params)
    opts = Optimizers.create(policy, ["aux", "main"], False, optimizer_settings(params), total=4)
    prompt = policy.prompt_ids("main", [{"role": "user", "content": "Write main."}])
    completions, advantages = [[9, 10, 11], [12, 13], [14]], [1.0, -1.0, 0.5]
    with torch.no_grad():
        logp, mask = policy.token_logprobs("main", [prompt] * 3, completions, grad=False)
    # token_mean: -A * (mean log-prob of the row's tokens), averaged over all 3 rows
    expected = (
        -sum(a * float(lp.sum() / m.sum()) for a, lp, m in zip(advantages, logp, mask, strict=True))
        / 3
    )
    rows = {"main": [(prompt, c, a) for c, a in zip(completions, advantages, strict=True)]}
    stats = update_agents(policy, opts, rows, update_settings(params))
    assert stats["loss/main"] == pytest.approx(expected, rel=1e-4)
    assert stats["grad_norm/main"] > 0 and stats["loss/aux"] == 0.0


def test_gradient_checkpointing_auto_is_on_for_a_cpu_only():
    assert gradient_checkpointing(parse_params({})) is True
    assert (
        gradient_checkpointing(parse_params({"model": {"gradient_checkpointing": False}})) is False
    )
    assert gradient_checkpointing(parse_params({"model": {"gradient_checkpointing": True}})) is True


def test_microbatch_and_sandbox_workers_auto():
    assert microbatch(parse_params({})) == 8  # a CPU here
    assert microbatch(parse_params({"train": {"microbatch": 32}})) == 32
    assert parse_params({}).sandbox.worker_count() == len(os.sched_getaffinity(0))
    assert parse_params({"sandbox": {"workers": 3}}).sandbox.worker_count() == 3
    with pytest.raises(Exception, match="microbatch"):
        parse_params({"train": {"microbatch": 0}})


def test_mixed_passes_keep_order_and_cap_rows_and_padded_tokens():
    from orchestry.algos.pg_update import _chunks

    short = [("a", ([1] * 100, [2] * 50, 1.0)) for _ in range(5)]
    long = [("b", ([k] * 1500, [2] * 100, -1.0)) for k in range(3)]  # three distinct prompts
    same = [("b", ([7] * 1500, [2] * 100, 0.5)) for _ in range(2)]  # one prompt, shared
    live = short[:3] + long + short[3:] + same
    chunks = _chunks(live, microbatch=2)
    assert [x for c in chunks for x in c] == live  # every row once, in order
    assert all(len(c) <= 2 for c in chunks)
    # a pass pads each distinct prompt to the longest, and every completion to the longest
    # (cap 1024): two short rows share one prompt (100 + 2 x 50); distinct long prompts go one per
    # pass (2 x 1500 + 2 x 100 > 1024), and so does a long prompt shared by two rows (1700)
    assert [len(c) for c in chunks] == [2, 1, 1, 1, 1, 2, 1, 1]
