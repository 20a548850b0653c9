"""Shared-prefix prefill: compute the KV cache of a common prompt prefix once per group of rows.

A rollout asks for G samples of every prompt, and a discussion's second round continues G
conversations that start with the same prompt. `generate` would prefill every row in full; on a
CPU the prefill of 64 rows of 200-400 tokens costs as much as decoding 128 tokens for them. Here
rows that share a prefix (same adapter, same first tokens) are grouped, each group's prefix runs
through the model once, its cache is copied to the group's rows, and `generate` continues from
that cache with only the rest of each row (at least its last token) left to prefill.

Padding: prefixes are left-padded to one width and the rest of every row is left-padded to
another, so a row's padding may sit between its prefix and its rest; the attention mask marks
it and the position ids skip it, as `generate` computes them from the mask.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

DECODE_COST = 1 / 128
"""Cost of one padded context column per row and decode step, in prefill tokens (measured on a
CPU: a decode step of 64 rows gains ~0.5 ms per context column, a prefill token costs ~1 ms)."""


@dataclass(frozen=True)
class PrefixPlan:
    """rows[j] == prefixes[group[j]] + rests[j], every rest non-empty."""

    prefixes: list[list[int]]
    prefix_adapters: list[str]
    group: list[int]
    rests: list[list[int]]

    def cost(self, decode_steps: int) -> float:
        """Prefill tokens including padding, plus the decode cost of the padded width."""
        wp, wr = max(map(len, self.prefixes)), max(map(len, self.rests))
        n = len(self.rests)
        return len(self.prefixes) * wp + n * wr + n * (wp + wr) * decode_steps * DECODE_COST


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _runs(
    rows: list[list[int]], adapters: list[str], order: list[int], links: list[int], tau: int
) -> PrefixPlan:
    """Rows in `order` grouped into maximal runs whose consecutive common prefixes are >= tau."""
    members: list[list[int]] = [[order[0]]]
    for k, j in enumerate(order[1:]):
        if links[k] >= tau:
            members[-1].append(j)
        else:
            members.append([j])
    prefixes, prefix_adapters = [], []
    group, rests = [0] * len(rows), [[] for _ in rows]
    for g, idx in enumerate(members):
        first, last = rows[idx[0]], rows[idx[-1]]
        cut = min(_common(first, last), *(len(rows[j]) - 1 for j in idx))
        prefixes.append(first[:cut])
        prefix_adapters.append(adapters[idx[0]])
        for j in idx:
            group[j], rests[j] = g, rows[j][cut:]
    return PrefixPlan(prefixes, prefix_adapters, group, rests)


def plan_prefixes(rows: list[list[int]], adapters: list[str], decode_steps: int) -> PrefixPlan:
    """The cheapest grouping of rows (same adapter, shared leading tokens) by `PrefixPlan.cost`.

    In lexicographic order the common prefix of a run of rows is the smallest common prefix of
    neighbours in it, so the candidates are the runs cut where neighbours share fewer than tau
    tokens, for every tau that occurs. Each group's prefix stops one token short of its shortest
    row. The largest tau leaves identical rows together and every other row alone (its prefix
    is all but its last token), which costs no more than no sharing at all.
    """
    if any(len(r) < 2 for r in rows):
        raise ValueError("every row needs at least 2 tokens to split into a prefix and a rest")
    order = sorted(range(len(rows)), key=lambda j: (adapters[j], rows[j]))
    links = [
        _common(rows[a], rows[b]) if adapters[a] == adapters[b] else 0
        for a, b in zip(order, order[1:], strict=False)
    ]
    taus = sorted({t for t in links if t > 0} | {max(map(len, rows))})
    plans = [_runs(rows, adapters, order, links, tau) for tau in taus]
    return min(plans, key=lambda plan: plan.cost(decode_steps))


class GrowingLayer(DynamicLayer):
    """A KV cache layer that writes new tokens into spare room instead of concatenating.

    transformers' `DynamicLayer` concatenates at every step, copying the whole cache: for 64 rows
    of 600 tokens that is ~2 GB of memory traffic per decode step, most of a CPU step's time.
    Here the keys and values are views into a buffer with room for `reserve` more tokens; the
    buffer is reallocated (doubling) only when it is full or was replaced (e.g. by a batch select).
    """

    def __init__(self, reserve: int = 128) -> None:
        super().__init__()
        self.reserve = reserve
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        used = self.keys.shape[-2] if self.keys.numel() else 0
        need = used + key_states.shape[-2]
        if (
            self._keys is None
            or need > self._keys.shape[-2]
            or self.keys.numel()
            and self.keys.data_ptr() != self._keys.data_ptr()
        ):
            room = max(need + self.reserve, 2 * used)
            self._keys = self._grow(self.keys, key_states, used, room)
            self._values = self._grow(self.values, value_states, used, room)
        self._keys[:, :, used:need] = key_states
        self._values[:, :, used:need] = value_states
        self.keys, self.values = self._keys[:, :, :need], self._values[:, :, :need]
        return self.keys, self.values

    @staticmethod
    def _grow(old: torch.Tensor, new: torch.Tensor, used: int, room: int) -> torch.Tensor:
        buffer = new.new_empty((*new.shape[:2], room, new.shape[-1]))
        if used:
            buffer[:, :, :used] = old
        return buffer


class GrowingCache(DynamicCache):
    """A `DynamicCache` made of `GrowingLayer`s."""

    def __init__(self, reserve: int = 128) -> None:
        Cache.__init__(self, layer_class_to_replicate=lambda: GrowingLayer(reserve))


def cache_argument(model: torch.nn.Module) -> str:
    """The keyword under which this transformers version takes a KV cache: `cache` in recent
    versions (which deprecate `past_key_values`), `past_key_values` in older ones."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    forward = inspect.signature(type(inner).forward).parameters
    return "cache" if "cache" in forward else "past_key_values"


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask, skipping padding (as `generate` computes them)."""
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


def left_pad(
    rows: list[list[int]], width: int, pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and attention mask of rows right-aligned in `width` columns."""
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


def prefill(
    model: torch.nn.Module,
    plan: PrefixPlan,
    pad: int,
    device: torch.device,
    mixed: bool,
    reserve: int,
) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
    """Run the prefixes once; return the full rows' ids, mask and the cache copied to them.

    `mixed` passes each prefix's adapter name to peft (mixed-adapter batch); otherwise the active
    adapter is used. The returned ids are [prefix | rest] per row, both parts left-padded; the
    cache has room for the rests plus `reserve` new tokens.
    """
    width = max(map(len, plan.prefixes))
    ids, mask = left_pad(plan.prefixes, width, pad, device)
    kwargs: dict[str, object] = {"adapter_names": plan.prefix_adapters} if mixed else {}
    rest_width = max(map(len, plan.rests))
    cache = GrowingCache(rest_width + reserve)
    with torch.no_grad():
        model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions(mask),
            **{cache_argument(model): cache},
            use_cache=True,
            logits_to_keep=1,
            **kwargs,
        )
    index = torch.tensor(plan.group, device=device)
    cache.batch_select_indices(index)
    rest_ids, rest_mask = left_pad(plan.rests, rest_width, pad, device)
    full_ids = torch.cat([ids[index], rest_ids], dim=1)
    full_mask = torch.cat([mask[index], rest_mask], dim=1)
    return full_ids, full_mask, cache
