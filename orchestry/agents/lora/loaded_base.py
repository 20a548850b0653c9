"""One loaded base model with its agents' adapters: what the team, the batched generation and the
adapter files all work on (its own module, so none of them imports another to get the type)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from peft import PeftModel
from transformers import PreTrainedTokenizerBase

from orchestry.agents.lora.base_model import ModelSpec
from orchestry.agents.lora.engine import cuda_engine


@dataclass
class LoadedBase:
    """One loaded base model with the adapters of the agents that use it (and its stop tokens).

    The CUDA engine's state of the model (`cuda/`: its graph decoders and the update's recorded
    passes) is made on first use, through `engine.cuda_engine`, so a CPU run never loads it."""

    spec: ModelSpec
    model: PeftModel
    tokenizer: PreTrainedTokenizerBase
    adapters: list[str]
    stop_ids: set[int] = field(default_factory=set)
    record_update_graphs: bool = True
    """The update's passes as CUDA graphs (on a GPU; False: eager passes, `memory_plan`)."""
    decoders: Any = None
    """`cuda.decoder_cache.DecoderCache`, once `decoder_cache` made it."""
    update: Any = None
    """`cuda.graph_update.GraphUpdate` (the update's recorded passes), once `graph_update` made it."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def decoder_cache(self) -> Any:
        """The graph path's decoders of this model (`cuda.decoder_cache.DecoderCache`)."""
        if self.decoders is None:
            self.decoders = cuda_engine().DecoderCache()
        return self.decoders

    def graph_update(self) -> Any:
        """The written-out update's passes of this model (`cuda.graph_update.GraphUpdate`)."""
        if self.update is None:
            self.update = cuda_engine().GraphUpdate(self.record_update_graphs)
        return self.update
