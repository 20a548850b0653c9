"""Shared-prefix prefill: compute the KV cache of a common prompt prefix once per group of rows.

A rollout asks for G samples of every prompt, and a discussion's second round continues G
conversations that start with the same prompt. `generate` would prefill every row in full; on a
CPU the prefill of 64 rows of 200-400 tokens costs as much as decoding 128 tokens for them. Here
rows that share a prefix (same adapter, same first tokens) are grouped, each group's prefix runs
through the model once, its cache is copied to the group's rows, and `generate` continues from
that cache with only the rest of each row (at least its last token) left to prefill.

The update's log-probs use the same idea (`completion_logits`): the G completions of a prompt
share its forward pass, with gradients flowing into the prefix's keys and values from every row.

Padding: prefixes are left-padded to one width and the rest of every row is left-padded to
another, so a row's padding may sit between its prefix and its rest; the attention mask marks
it and the position ids skip it, as `generate` computes them from the mask.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
import transformers
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

try:  # transformers >= 5: checkpointed layers drop a cache unless they are told it is safe
    from transformers.modeling_layers import GradientCheckpointingLayer
except ImportError:  # pragma: no cover - older transformers
    GradientCheckpointingLayer = None

log = logging.getLogger("orchestry.agents.lora.kv_prefix")

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


def pad_rows(
    rows: list[list[int]], width: int, pad: int, device: torch.device, side: str = "left"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids and attention mask of rows aligned to the right (side="left": padding first) or to
    the left (side="right") of `width` columns."""
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        if row:
            cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[i, cols] = torch.tensor(row, dtype=torch.long)
            mask[i, cols] = 1
    return upload(ids, device), upload(mask, device)


def upload(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`host` on `device`. To a GPU through pinned memory without waiting: a plain `.to(device)`
    waits for every kernel queued before it, and in the update that wait, once per microbatch,
    left the GPU idle while the host laid out the next one and launched its graph (~90 ms of the
    3B update's 0.84 s, issue 36). The caching host allocator keeps the pinned block until the
    copy is done."""
    if torch.device(device).type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def distinct_prompts(
    prompts: Sequence[Sequence[int]], row_adapter: Sequence[int]
) -> tuple[list[tuple[tuple[int, ...], int]], list[int], list[int]]:
    """The distinct (prompt, adapter) pairs of the rows in the order they first appear, the row
    where each first appears, and each row's pair: the G samples of a group share one prompt,
    run once per adapter (decoding's prefill and the update's prompt pass alike)."""
    first: dict[tuple[tuple[int, ...], int], int] = {}
    for i, pair in enumerate(zip(map(tuple, prompts), row_adapter, strict=True)):
        first.setdefault(pair, i)
    index = {pair: u for u, pair in enumerate(first)}
    of = [index[pair] for pair in zip(map(tuple, prompts), row_adapter, strict=True)]
    return list(first), list(first.values()), of


def _run_into(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, cache: Cache) -> None:
    """Run left-padded rows through the model for their keys and values in `cache` (the cache
    is passed explicitly, so `use_cache` stays off and checkpointed layers keep quiet)."""
    model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions(mask),
        use_cache=False,
        logits_to_keep=1,
        **{cache_argument(model): cache},
    )


def prefill(
    model: torch.nn.Module,
    plan: PrefixPlan,
    pad: int,
    device: torch.device,
    reserve: int,
    route: Callable[[list[str]], contextlib.AbstractContextManager] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, DynamicCache]:
    """Run the prefixes once; return the full rows' ids, mask and the cache copied to them.

    `route(adapter per row)` is entered around the prefixes' forward to send each prefix through
    its own adapter (`orchestry.agents.lora.stacked_lora.stacked_lora`); without it the active adapter is used.
    The returned ids are [prefix | rest] per row, both parts left-padded; the cache has room for
    the rests plus `reserve` new tokens.
    """
    width = max(map(len, plan.prefixes))
    ids, mask = pad_rows(plan.prefixes, width, pad, device)
    rest_width = max(map(len, plan.rests))
    cache = GrowingCache(rest_width + reserve)
    with torch.no_grad(), route(plan.prefix_adapters) if route else contextlib.nullcontext():
        _run_into(model, ids, mask, cache)
    index = torch.tensor(plan.group, device=device)
    cache.batch_select_indices(index)
    rest_ids, rest_mask = pad_rows(plan.rests, rest_width, pad, device)
    full_ids = torch.cat([ids[index], rest_ids], dim=1)
    full_mask = torch.cat([mask[index], rest_mask], dim=1)
    return full_ids, full_mask, cache


class RecordingLayer(DynamicLayer):
    """Keeps the keys and values of the first pass through it and returns each pass its own.

    The first pass is a prefix's forward; a later one can only be gradient checkpointing replaying
    it in the backward pass, which must not replace what the rows' forward read."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
        return key_states, value_states


class PrefixLayer(DynamicLayer):
    """Read-only keys and values of each row's prefix: every pass attends to them and its own."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.lazy_initialization(keys, values)
        self.keys, self.values = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return (
            torch.cat([self.keys, key_states], dim=-2),
            torch.cat([self.values, value_states], dim=-2),
        )


class _LayerCache(DynamicCache):
    def __init__(self, layers: list[DynamicLayer] | None = None, layer_class=None) -> None:
        Cache.__init__(self, layers=layers, layer_class_to_replicate=layer_class)


def checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model recomputes its layers in the backward pass (gradient checkpointing)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new name first
        if hasattr(type(inner), name):
            return bool(getattr(inner, name))
    return False


def can_share_prefix(model: torch.nn.Module, grad: bool) -> bool:
    """`completion_logits` may share prefixes: always without gradients; with them only where
    checkpointed layers can be told to keep a cache (they replay it read-only here)."""
    if not (grad and checkpointing(model)):
        return True
    if GradientCheckpointingLayer is not None and hasattr(
        GradientCheckpointingLayer, "_can_checkpoint_with_cache"
    ):
        return True
    _say_prompts_run_in_full(transformers.__version__)  # same results, only slower
    return False


@functools.cache
def _say_prompts_run_in_full(version: str) -> None:
    log.warning(
        "transformers %s cannot keep a cache under gradient checkpointing (needs >= 5.15): "
        "the update runs every prompt in full",
        version,
    )


@contextlib.contextmanager
def _cache_under_checkpointing(model: torch.nn.Module) -> Iterator[None]:
    layers = [
        m
        for m in model.modules()
        if GradientCheckpointingLayer is not None and isinstance(m, GradientCheckpointingLayer)
    ]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer in layers:
            del layer._can_checkpoint_with_cache


def completion_logits(
    model: torch.nn.Module,
    prompts: list[list[int]],
    completions: list[list[int]],
    pad: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits [B, Wc, V] predicting each completion token, the tokens [B, Wc] and their mask.

    Rows whose prompts share leading tokens are grouped (`plan_prefixes`), each group's prefix
    runs once and the rows continue from its keys and values, so G completions of one prompt cost
    one prompt; every row runs in full where `can_share_prefix` says no (or a prompt has one token). Layout of the rows' forward:
    [prompt rest, left-padded | completion, right-padded], so every completion starts in the same
    column and only its logits are computed. With gradients on, they reach the adapter through
    the prefix too; gradient checkpointing replays the prefix and the rows read-only.
    """
    share = min(map(len, prompts)) >= 2 and can_share_prefix(model, torch.is_grad_enabled())
    tails = prompts
    if share:
        plan = plan_prefixes(prompts, [""] * len(prompts), 0)
        pre_ids, pre_mask = pad_rows(plan.prefixes, max(map(len, plan.prefixes)), pad, device)
        tails = plan.rests
    tail_ids, tail_mask = pad_rows(tails, max(map(len, tails)), pad, device)
    width_c = max(map(len, completions))
    comp_ids, comp_mask = pad_rows(completions, width_c, pad, device, side="right")
    ids, mask = torch.cat([tail_ids, comp_ids], 1), torch.cat([tail_mask, comp_mask], 1)
    kwargs: dict[str, object] = {}
    with _cache_under_checkpointing(model) if share else contextlib.nullcontext():
        if share:
            recorder = _LayerCache(layer_class=RecordingLayer)
            _run_into(model, pre_ids, pre_mask, recorder)
            index = torch.tensor(plan.group, device=device)
            kwargs[cache_argument(model)] = _LayerCache(
                layers=[PrefixLayer(*_rows(r, index)) for r in recorder.layers]
            )
            mask = torch.cat([pre_mask[index], mask], 1)
        logits = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions(mask)[:, -ids.shape[1] :],
            use_cache=False,
            logits_to_keep=width_c + 1,
            **kwargs,
        ).logits
    # Column j of the kept logits predicts completion token j (the last one predicts nothing).
    return logits[:, :-1, :], comp_ids, comp_mask


def _rows(layer: RecordingLayer, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefix's keys and values for rows `index` (rows repeat). On a CPU `keys[index]`'s backward
    adds repeated rows with parallel atomic adds, rounding differently in every run; index_select's
    adds them in order. On a GPU it is the other way round (torch.use_deterministic_algorithms)."""
    if index.device.type != "cpu":
        return layer.keys[index], layer.values[index]
    return layer.keys.index_select(0, index), layer.values.index_select(0, index)


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target], float32 [...], of logits [..., vocab] and targets [...]: the
    torch form of the completions' per-token log-probs (the peft update's, and the written-out
    update's off a GPU; on a GPU that one reads them from Triton kernels, `cuda/triton_logprob.py`)."""
    logits = logits.float()
    chosen = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)
