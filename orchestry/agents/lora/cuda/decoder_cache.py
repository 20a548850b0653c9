"""The decoders of one model by shape (`DecoderCache`), and a call of more rows than a process's share
of a card holds at once decoded in chunks (`ChunkedDecoder`, `row_bytes`; card_share.py, issue 56)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

import torch
from peft import PeftModel

from orchestry.agents.lora import card_share
from orchestry.agents.lora.cuda.graph_decode import ROW_BUCKET, DecodeShape, GraphDecoder

KEPT_GRAPHS = 4
"""Decoders (graphs and their KV caches) kept per model; the least recently used goes first."""


def row_bytes(model: PeftModel, shape: DecodeShape) -> int:
    """A planning estimate of one decode row's memory at `shape`: twice its KV cache (2,000 rows of
    the 135M model at 704 columns held ~55 GB, 27.5 MB a row, against 16 MB of cache), its float32
    logits, probabilities and sampler scratch, and its prefill's activations when its prompt is
    its own (the discussion baseline's 3,968 distinct prompts: a chunk planned without them ran out
    of an 18.6 GiB share in the gated MLP of the prefill, issue 56)."""
    config = model.get_base_model().config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    weight = model.get_base_model().get_input_embeddings().weight
    size = weight.element_size()
    length = shape.width + shape.max_new
    cache = config.num_hidden_layers * 2 * length * kv_heads * head_dim * size
    prefill = shape.width * (3 * config.intermediate_size + 6 * config.hidden_size) * size
    return 2 * cache + 2 * prefill + weight.shape[0] * 4 * 4


class ChunkedDecoder:
    """A call of more rows than a process's share of the card holds at once, decoded in chunks of
    `shape.rows` rows, each by the cache's decoder of that shape (the last chunk padded to it)."""

    def __init__(
        self, cache: DecoderCache, model: PeftModel, adapters: Sequence[str], shape: DecodeShape
    ) -> None:
        self.cache, self.model, self.adapters, self.shape = cache, model, list(adapters), shape

    def run(
        self,
        rows: list[list[int]],
        row_adapter: list[int],
        pad: int,
        stop_ids: set[int],
        generator: torch.Generator | None = None,
    ) -> list[list[int]]:
        """The new tokens of each row, as `GraphDecoder.run` gives them."""
        out: list[list[int]] = []
        step = self.shape.rows
        for start in range(0, len(rows), step):
            decoder = self.cache.get(self.model, self.adapters, self.shape)
            chunk = slice(start, start + step)
            out += decoder.run(rows[chunk], row_adapter[chunk], pad, stop_ids, generator)
        return out


class DecoderCache:
    """The decoders of one model, by shape, the least recently used dropped beyond `KEPT_GRAPHS`.

    When the process has a share of the card (`card_share`), a decoder is made only once the
    decoders kept beside it fit the share with it (the least recently used dropped first), and a
    call of more rows than fit is decoded in chunks (`ChunkedDecoder`)."""

    def __init__(self) -> None:
        self._decoders: OrderedDict[tuple, GraphDecoder] = OrderedDict()
        self._bytes: dict[tuple, int] = {}

    def get(
        self, model: PeftModel, adapters: Sequence[str], shape: DecodeShape
    ) -> GraphDecoder | ChunkedDecoder:
        key = (shape, tuple(adapters))
        if key in self._decoders:
            self._decoders.move_to_end(key)
            return self._decoders[key]
        device = model.get_base_model().get_input_embeddings().weight.device
        per_row = row_bytes(model, shape)
        room = card_share.decode_room(device, sum(self._bytes.values()))
        if room is not None:
            fit = max(ROW_BUCKET, room // per_row // ROW_BUCKET * ROW_BUCKET)
            if shape.rows > fit:
                return ChunkedDecoder(self, model, adapters, replace(shape, rows=fit))
        need = per_row * shape.rows
        dropped = False
        while self._decoders and (
            len(self._decoders) >= KEPT_GRAPHS
            or (room is not None and sum(self._bytes.values()) + need > room)
        ):
            old, _ = self._decoders.popitem(last=False)
            self._bytes.pop(old)
            dropped = True
        if dropped and room is not None:
            torch.cuda.empty_cache()  # give the dropped caches back to the share
        self._decoders[key] = GraphDecoder(model, adapters, shape)
        self._bytes[key] = need
        return self._decoders[key]
