"""The agents' policy: a frozen base model, a LoRA adapter per agent, batched sampling, log-probs.

MAGRPO trains several agents at once. Instead of one full model per agent we keep ONE frozen base
model per distinct `ModelSpec` and give each agent its own LoRA adapter (peft). A rollout samples
the G completions of every agent and every problem in one batched `generate` call: rows of
different agents use their own adapter in the same forward pass (`orchestry.agents.lora.stacked_lora`).
On CUDA the rows of every adapter decode together in our own loop, one step replayed as a CUDA
graph (`orchestry.agents.lora.cuda.graph_decode`, reached only through `orchestry.agents.lora.engine`,
so a CPU run loads none of the CUDA engine). The batched call itself is
`orchestry.agents.lora.generation`; the adapter files on disk are `orchestry.agents.lora.adapter_files`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import get_peft_model_state_dict
from transformers import PreTrainedTokenizerBase

from orchestry.agents.base import Generation, GenRequest, SamplingSpec
from orchestry.agents.lora.adapter_files import (
    POLICY_FILE,
    load_adapter_weights,
    read_policy_file,
    write_adapters,
)
from orchestry.agents.lora.base_model import ModelSpec, load_base_model
from orchestry.agents.lora.engine import RowLoss, cuda_engine, written_applies
from orchestry.agents.lora.generation import generate_group
from orchestry.agents.lora.kv_prefix import completion_logits, target_logprobs
from orchestry.agents.lora.loaded_base import LoadedBase
from orchestry.agents.lora.nonfinite import describe, find_nonfinite_row, first_nonfinite_grad

SHARED_ADAPTER = "shared"
"""Adapter name used by every agent when `shared_adapter=True`."""

_AGENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True, kw_only=True)
class LoraSpec:
    """LoRA settings shared by every agent's adapter (values: params `model.lora`)."""

    r: int
    """Rank of the low-rank update."""
    alpha: int
    """Scaling numerator: the update is scaled by alpha / r."""
    dropout: float
    """Dropout on the adapter input (active only when computing log-probs with gradients)."""
    target_modules: tuple[str, ...]
    """Names of the linear layers that get an adapter."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if self.r < 1 or not self.target_modules or not 0.0 <= self.dropout < 1.0:
            raise ValueError(
                f"invalid LoraSpec {self}: need r >= 1, target_modules, 0 <= dropout < 1"
            )


# --------------------------------------------------------------------------- the team policy


class TeamPolicy:
    """One frozen base model per distinct ModelSpec, a LoRA adapter per agent (or a shared one)."""

    def __init__(
        self,
        model: ModelSpec | Mapping[str, ModelSpec],
        agents: Sequence[str],
        lora: LoraSpec,
        shared_adapter: bool = False,
        seed: int = 0,
        gradient_checkpointing: bool = True,
        record_update_graphs: bool = True,
    ) -> None:
        record = record_update_graphs  # the update's passes as CUDA graphs (on a GPU)
        self.agents = tuple(agents)
        bad = [a for a in self.agents if not _AGENT_NAME.match(a)]
        if not self.agents or bad or len(set(self.agents)) != len(self.agents):
            raise ValueError(
                f"agents must be unique names matching {_AGENT_NAME.pattern}: {agents}"
            )
        if not isinstance(model, ModelSpec) and set(model) != set(self.agents):
            raise ValueError(f"model specs are given for {sorted(model)}, agents are {agents}")
        specs = {a: model if isinstance(model, ModelSpec) else model[a] for a in self.agents}
        if shared_adapter and len(set(specs.values())) > 1:
            raise ValueError("shared_adapter=True needs one base model for all agents")
        self.lora = lora
        self.shared_adapter = shared_adapter
        self.seed = seed
        self.update_path: str | None = None  # "written" | "peft"; None: written on a GPU (`mixes`)
        # generate calls made so far; checkpoints save it, so a resumed run samples what the
        # uninterrupted run would have
        self.generate_calls = 0
        self._adapter = {a: SHARED_ADAPTER if shared_adapter else a for a in self.agents}
        self._bases: dict[ModelSpec, LoadedBase] = {}
        config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        for spec in dict.fromkeys(specs.values()):
            base_model, tokenizer = load_base_model(spec)
            if gradient_checkpointing:  # active only in training mode, i.e. log-probs with grad
                enable = getattr(base_model, "activation_checkpointing_enable", None)
                enable = enable or base_model.gradient_checkpointing_enable  # older name
                enable({"use_reentrant": False})
            adapters = list(
                dict.fromkeys(self._adapter[a] for a in self.agents if specs[a] == spec)
            )
            with self._seeded(seed, base_model.device):  # LoRA A matrices are drawn at random
                peft_model = get_peft_model(base_model, config, adapter_name=adapters[0])
                for name in adapters[1:]:
                    peft_model.add_adapter(name, config)
            stop = {tokenizer.eos_token_id, *_as_list(base_model.generation_config.eos_token_id)}
            self._bases[spec] = LoadedBase(
                spec, peft_model, tokenizer, adapters, stop - {None}, record_update_graphs=record
            )
        self._base_of = {a: self._bases[specs[a]] for a in self.agents}
        for agent in self.agents:
            for p in self.trainable_parameters(agent):
                p.requires_grad_(True)

    # ----------------------------------------------------------------------- accessors

    def tokenizer(self, agent: str) -> PreTrainedTokenizerBase:
        """The tokenizer of the agent's base model."""
        return self._base(agent).tokenizer

    def peft_model(self, agent: str) -> PeftModel:
        """The peft model holding the agent's adapter (shared with agents of the same base)."""
        return self._base(agent).model

    def adapter_name(self, agent: str) -> str:
        """Name of the agent's adapter inside its peft model."""
        self._base(agent)
        return self._adapter[agent]

    def trainable_parameters(self, agent: str) -> list[torch.nn.Parameter]:
        """The LoRA parameters of the agent's adapter (the same objects for a shared adapter)."""
        pattern = re.compile(rf"\.lora_[A-Za-z_]+\.{re.escape(self.adapter_name(agent))}(\.|$)")
        model = self._base(agent).model
        return [p for name, p in model.named_parameters() if pattern.search(name)]

    def adapter_state(self, agent: str) -> dict[str, torch.Tensor]:
        """A CPU copy of the agent's adapter weights, keyed as in a saved adapter file."""
        base = self._base(agent)
        state = get_peft_model_state_dict(base.model, adapter_name=self._adapter[agent])
        return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}

    def prompt_ids(self, agent: str, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the chat-templated prompt, ending with the assistant header."""
        tokenizer = self._base(agent).tokenizer
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    # ----------------------------------------------------------------------- generation

    def generate(
        self, requests: Sequence[GenRequest], sampling: SamplingSpec, path: str | None = None
    ) -> list[Generation]:
        """Sample `n` completions per request, all agents of one base model in one batched call.

        path (`orchestry.agents.lora.generation.PATHS`): None means the graph path on CUDA (the
        static path for models it does not write out) and the eager path on CPU. The eager and
        graph paths run one mixed-adapter call per base model; the static path one per adapter.
        Sampling is seeded from (seed, number of earlier generate calls), so a policy built with
        the same seed and given the same calls returns the same samples on CPU.
        """
        for request in requests:
            self._base(request.agent)
            if request.n < 1:
                raise ValueError(f"GenRequest for {request.agent!r} asks for n={request.n} < 1")
        prompts = [self.prompt_ids(r.agent, r.messages) for r in requests]
        results: list[Generation | None] = [None] * len(requests)
        with self._seeded(self._call_seed(), *(b.device for b in self._bases.values())):
            for base in self._bases.values():
                mine = [i for i, r in enumerate(requests) if self._base_of[r.agent] is base]
                chosen = path or _default_path(base)
                groups = (
                    [
                        [i for i in mine if self._adapter[requests[i].agent] == a]
                        for a in base.adapters
                    ]
                    if chosen == "static"
                    else [mine]
                )
                activate = functools.partial(self._activate, base)
                for group in filter(None, groups):
                    generations = generate_group(
                        base, requests, prompts, group, self._adapter, activate, sampling, chosen
                    )
                    for i, gen in zip(group, generations, strict=True):
                        results[i] = gen
        done = [g for g in results if g is not None]
        if len(done) != len(requests):  # every request belongs to exactly one base and group
            raise RuntimeError(f"generate filled {len(done)} of {len(requests)} requests")
        return done

    # ----------------------------------------------------------------------- log-probs

    def sequence_logprobs(
        self,
        agent: str,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        grad: bool,
        reduction: str = "sum",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of each completion given its prompt under the agent's adapter.

        Returns (log-prob per sequence, float32; token count per sequence, int64); reduction
        "token_mean" divides the sum by the count. With grad=True the graph reaches the agent's
        LoRA parameters.
        """
        if reduction not in ("sum", "token_mean"):
            raise ValueError(f"reduction must be 'sum' or 'token_mean', got {reduction!r}")
        token_logprobs, mask = self.token_logprobs(agent, prompt_ids, completion_ids, grad)
        totals = token_logprobs.sum(-1)
        counts = mask.sum(-1).long()
        if reduction == "token_mean":
            totals = totals / counts.clamp(min=1)
        return totals, counts

    def token_logprobs(
        self,
        agent: str,
        prompt_ids: list[list[int]],
        completion_ids: list[list[int]],
        grad: bool,
        reference: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token log-probabilities [B, T] of the completions and their mask (float32).

        Batched: completions that share a prompt (the G samples of a group) share its forward
        pass (`orchestry.agents.lora.kv_prefix.completion_logits`), and only completion logits are computed.
        With grad=True the graph reaches the agent's LoRA parameters; reference=True uses the base
        model with adapters disabled (the reference policy of the KL penalty).
        """
        if len(prompt_ids) != len(completion_ids) or not prompt_ids:
            raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
        base = self._base(agent)
        self._activate(base, self._adapter[agent])
        base.model.train(grad)
        try:
            with (
                torch.set_grad_enabled(grad),
                base.model.disable_adapter() if reference else contextlib.nullcontext(),
            ):
                logits, targets, token_mask = completion_logits(
                    base.model,
                    prompt_ids,
                    completion_ids,
                    base.tokenizer.pad_token_id,
                    base.device,
                )
                token_logprobs = target_logprobs(logits, targets) * token_mask
        finally:
            base.model.eval()
        return token_logprobs, token_mask.to(token_logprobs.dtype)

    def mixes(self, agents: Sequence[str]) -> bool:
        """Whether `mixed_backward` serves these agents: one base, `written_applies`."""
        bases = {id(self._base(a)): self._base(a) for a in agents}
        base = next(iter(bases.values()), None)
        return len(bases) == 1 and written_applies(base.model, self.update_path)

    def mixed_backward(
        self,
        owners: Sequence[str],
        agents: Sequence[str],
        prompts: list[list[int]],
        completions: list[list[int]],
        advantages: Sequence[float],
        weights: Sequence[float],
        row_loss: RowLoss,
    ) -> torch.Tensor:
        """One pass over rows of several agents (row i under `agents[i]`'s adapter): returns each
        row's loss `row_loss * weight` and adds the gradient of their sum to the `.grad` of the
        adapters with rows (`agents/lora/cuda/graph_update.py`; `owners`: every agent stepped)."""
        base = self._base(agents[0])
        params = {self._adapter[o]: self.trainable_parameters(o) for o in owners}
        names = [self._adapter[a] for a in agents]
        pad = base.tokenizer.pad_token_id
        return base.graph_update().run(
            base.model, params, names, prompts, completions, advantages, weights, row_loss, pad
        )

    def locate_nonfinite(self, owner: str, rows: Sequence[tuple[str, list[int], list[int]]]) -> str:
        """Where `owner`'s update went non-finite, in words (`orchestry.agents.lora.nonfinite`)."""
        base, adapter = self._base(owner), self._adapter[owner]
        named = [(n, p) for n, p in base.model.named_parameters() if f".{adapter}." in n]
        param = first_nonfinite_grad([(n, p) for n, p in named if ".lora_" in n])
        self._activate(base, adapter)
        site = find_nonfinite_row(base.model, [p for _, p in named], [r[1:] for r in rows])
        embedding = base.model.get_input_embeddings().weight
        return f"first parameter with a non-finite gradient: {param or 'none'}; " + describe(
            site, len(rows), base.tokenizer, embedding
        )

    # ----------------------------------------------------------------------- checkpoints

    def save_adapters(self, directory: Path) -> None:
        """Write directory/<adapter>/ (peft save_pretrained) and directory/policy.json, atomically.

        Each adapter folder loads with `PeftModel.from_pretrained(base_model, folder)`; policy.json
        records the agents, their adapter and base model, and the LoRA settings."""
        meta = {
            "agents": {
                a: {"adapter": self._adapter[a], "model": asdict(self._base_of[a].spec)}
                for a in self.agents
            },
            "lora": asdict(self.lora),
            "shared_adapter": self.shared_adapter,
            "seed": self.seed,
        }
        write_adapters(Path(directory), self._bases.values(), meta)

    def load_adapters(self, directory: Path) -> None:
        """Copy saved adapter weights into this policy's adapters in place (optimizers stay valid).

        The directory must come from `save_adapters` of a policy with the same agents, adapter
        names, base model names and LoRA settings."""
        directory = Path(directory)
        meta = read_policy_file(directory)
        mine = {
            a: {"adapter": self._adapter[a], "model": self._base_of[a].spec.name}
            for a in self.agents
        }
        theirs = {
            a: {"adapter": v["adapter"], "model": v["model"]["name"]}
            for a, v in meta["agents"].items()
        }
        if mine != theirs or LoraSpec(**meta["lora"]) != self.lora:
            raise ValueError(
                f"{directory / POLICY_FILE} holds agents {theirs} with {meta['lora']}, but this "
                f"policy has {mine} with {asdict(self.lora)}"
            )
        load_adapter_weights(directory, self._bases.values())

    # ----------------------------------------------------------------------- internals

    def _base(self, agent: str) -> LoadedBase:
        if agent not in self._base_of:
            raise KeyError(f"unknown agent {agent!r}; this policy has {list(self.agents)}")
        return self._base_of[agent]

    def _activate(self, base: LoadedBase, adapter: str) -> None:
        base.model.set_adapter(adapter)
        # peft's set_adapter freezes the other adapters; every agent's adapter stays trainable.
        for agent in self.agents:
            if self._base_of[agent] is base:
                for p in self.trainable_parameters(agent):
                    p.requires_grad_(True)

    sample_stream: int = 0
    """The data-parallel rank sampling with this policy (`orchestry.agents.lora.dist`): rank 0, like a
    single process, seeds each call from (seed, calls); rank r > 0 from (seed, calls, r), its own."""

    def _call_seed(self) -> int:
        key = f"{self.seed}/{self.generate_calls}"
        if self.sample_stream:
            key += f"/rank{self.sample_stream}"
        digest = hashlib.sha256(key.encode()).digest()
        self.generate_calls += 1
        return int.from_bytes(digest[:8], "little") >> 1

    @staticmethod
    @contextmanager
    def _seeded(seed: int, *devices: torch.device) -> Iterator[None]:
        cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(seed)
            yield


def _default_path(base: LoadedBase) -> str:
    if base.device.type != "cuda":
        return "eager"
    return "graph" if cuda_engine().supports(base.model) else "static"


def _as_list(value: int | list[int] | None) -> list[int]:
    return list(value) if isinstance(value, list | tuple) else [] if value is None else [value]
