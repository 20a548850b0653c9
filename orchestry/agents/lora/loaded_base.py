"""One loaded base model with its agents' adapters: what the team, the batched generation and the
adapter files all work on (its own module, so none of them imports another to get the type)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from orchestry.agents.lora.base_model import ModelSpec
from orchestry.agents.lora.graph_decode import DecoderCache
from orchestry.agents.lora.graph_update import GraphUpdate


@dataclass
class LoadedBase:
    """One loaded base model with the adapters of the agents that use it (and its stop tokens)."""

    spec: ModelSpec
    model: PeftModel
    tokenizer: PreTrainedTokenizerBase
    adapters: list[str]
    stop_ids: set[int] = field(default_factory=set)
    decoders: DecoderCache = field(default_factory=DecoderCache)
    update: GraphUpdate = field(default_factory=GraphUpdate)  # the update's recorded passes

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
