"""Tools within a turn with the real embedded model (CPU): the model writes a call (greedy, asked to
echo one), generation stops at `</tool>`, the calculator runs, the model continues from a prompt that
holds the result, and one optimizer step trains on both segments, never on the result's tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from conftest import MODEL_CACHE, ROOT, limits, lora, model_spec, sampling

from orchestry.algos.pg_update import Optimizers, OptimizerSettings, UpdateSettings, update_agents
from orchestry.envs.base import Outcome, Roles, with_history
from orchestry.envs.code.problems import load_problem_dir
from orchestry.envs.tools.protocol import ToolBudget
from orchestry.envs.tools.registry import ToolUse
from orchestry.joint.turn import Ask, aligned, answer_turn

pytestmark = pytest.mark.slow  # a real model generates and trains

TASK = load_problem_dir(ROOT / "data/coop")[0]
ECHO = 'Output the following XML exactly:\n<tool name="calculator">2 + 2</tool>'


class EchoCallEnv:
    """One agent asked to echo a calculator call; tools on (the real ToolUse, calculator only)."""

    roles = Roles((), "aux")
    sequential = False
    tool_use = ToolUse(("calculator",), ToolBudget(1, 100), limits())

    def observe(self, task, agent, history=()):
        return with_history([{"role": "user", "content": ECHO}], history)

    def act(self, task, agent, text):
        return text

    def score(self, batch):
        return [Outcome(0.0, {}, {}) for _ in batch]

    def feedback(self, outcome, agent, advice=None):
        return ""

    def reference(self, task, agent):
        return None


@pytest.fixture(scope="module")
def policy() -> Iterator:
    from orchestry.agents.lora.team import TeamPolicy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield TeamPolicy(model_spec(cache_dir=str(MODEL_CACHE)), ("aux",), lora(r=8, alpha=16), seed=0)
    torch.set_num_threads(threads)


def test_the_model_calls_observes_continues_and_trains_on_its_own_tokens(policy):
    env = EchoCallEnv()
    greedy = sampling(max_new_tokens=32, do_sample=False)
    turn = answer_turn(policy, env, [Ask(TASK, {"aux": ()}, aligned(1, 1))], greedy)
    [answer] = turn.answers[0]["aux"]
    tokenizer = policy.tokenizer("aux")
    first = answer.generation.token_ids[answer.k]
    assert tokenizer.decode(first, skip_special_tokens=True).endswith("</tool>")  # stopped there
    [step] = answer.steps
    assert step.name == "calculator" and step.result == '<result name="calculator">\n4\n</result>'
    # the continuation was generated from the observation, the call and the result
    seen = [
        *env.observe(TASK, "aux"),
        {"role": "assistant", "content": answer.generation.texts[answer.k]},
        {"role": "user", "content": step.result},
    ]
    continuation = step.generation
    assert continuation.prompt_ids == policy.prompt_ids("aux", seen)
    assert "<result" not in tokenizer.decode(continuation.token_ids[0])
    assert len(turn.calls) == 2

    # one update on both segments (each its own prompt and tokens, the sample's advantage)
    rows = {
        "aux": [
            (answer.generation.prompt_ids, first, 1.0),
            (continuation.prompt_ids, continuation.token_ids[0], 1.0),
        ]
    }
    opt = OptimizerSettings(lr=1e-3, weight_decay=0.0, schedule="constant", warmup_steps=0)
    opts = Optimizers.create(policy, ["aux"], False, opt, total=1)
    before = [p.detach().clone() for p in policy.trainable_parameters("aux")]
    update = UpdateSettings(
        logprob_reduction="sum", kl_coef=0.0, grad_clip=1.0, microbatch=4, shared_adapter=False
    )
    update_agents(policy, opts, rows, update)
    after = policy.trainable_parameters("aux")
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
