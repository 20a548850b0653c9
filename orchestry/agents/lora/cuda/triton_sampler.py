"""`device_sampler.draw`'s softmax, top-p nucleus and inverse-CDF pick on a GPU, as Triton kernels.

The torch form (device_sampler.py) bisects the float bits of the probabilities, ~5 kernels over the
whole [rows, vocab] tensor a step, then a cumsum over the vocabulary (251 us a token at the 3B
shape). A first kernel did the bisection with one program per row, 31 passes over its row: 3.7 ms a
token at 128 rows x 151,936 entries (0.47 s of a 1.53 s generation; issue 36), one SM's bandwidth a
row. Here every launch runs rows x vocabulary chunks programs, and each pass tests `WAYS` thresholds
at once, so `passes(WAYS)` passes find the floor:

- `stats_kernel`, `probs_kernel` (`sample` only): `softmax(logits.float() / temperature)` straight
  from the head's logits (bfloat16: half the bytes a read), each chunk's max and sum of exponentials
  first, then the probabilities written; the same program sums pass 0's masses as it writes them.
- `mass_kernel`, pass s: each program narrows the interval pass s-1 tested (`bounds`) by that pass's
  masses (`_narrow`: the same sums in the same order in every program, so all agree; chunk 0 stores
  the result for pass s+1) and writes the mass its chunk holds at or above each of `WAYS`
  thresholds spread over it.
- `pick_kernel`: the floor (the interval's low end after the last narrowing); each chunk's kept mass
  is the last pass's mass at that threshold, so no pass recounts it. The chunk whose share of the
  kept mass's running sum holds `uniform * total` scans itself and writes the first token whose
  running sum exceeds it.

At 128 x 151,936 on an H200 the first form's pass took 48 us, a third of the bandwidth: its [256, 8]
accumulator put the 8 thresholds on 8 threads, so every 1 KB read went through shared memory behind
a barrier, one read in flight per program. A pass now keeps each threshold's sums in the thread that
read the entries (128-bit reads, `LOADS` of them in flight a thread, nothing through shared memory;
the sm_90 build's loop: 27 instructions an entry at 8 ways). At 128 x 151,936 on an H200
(benchmarks/decode_kernels.py, results/bench/decode_kernels.json, commit 447f04e): `pick` from
probabilities 279 us (552 us for the first form, same file at ed292b5); from the head's bfloat16
logits, `sample` 335 us against 469 us for torch's float copy, division and softmax before `pick`.
In the 3B training step's profile (results/bench/paper_scale.json) a pass takes 26.7 us, not the
~16 us of its bytes; predicated adds (setp, @p add: half the
ALU-pipe instructions) did not change that, nor did more loads in flight.
"""

from __future__ import annotations

import os

import torch

from orchestry.agents.lora.cuda.triton_support import tl, triton

WAYS = 8
"""Thresholds tested a pass: the interval shrinks 8-fold, so 10 passes find the floor. Fewer
thresholds make a pass cheaper, but less than in proportion, and need more passes: on an H200 at
128 rows, 8 is the fastest of 4, 8 and 16 at both the 3B and the 135M vocabularies
(benchmarks/decode_kernels.py, results/bench/decode_kernels.json; the first form's kernels)."""
BITS = 30
"""The interval starts at [0, bits of 1.0 + 1), under 2**30 wide."""


def passes(ways: int) -> int:
    """Passes that shrink the interval to one value: ceil-dividing 2**30 by `ways` that often."""
    n = 0
    while ways**n < 2**BITS:
        n += 1
    return n


CHUNK = 4096
"""Vocabulary entries a program covers (151,936 -> 38 chunks a row). A multiple of
`4 * 32 * warps * loads`: a program's reads never cross into the next chunk. With WARPS and LOADS
the fastest `sample` of the tunings results/bench/decode_kernels.json holds (commit 447f04e, an
H200, 128 rows): 335 us a token at the 3B shape against 343-389 us at (warps, loads) of (2, 4),
(4, 2) and (1, 2); 102 against 112-126 us at the 135M shape."""
BLOCK = 256
"""Entries the pick's scan reads at a time (one chunk a row scans)."""
WARPS = 1
"""Warps of a pass and of the softmax: a tile is 4 entries a thread (one 128-bit read of float32),
4 * 32 * WARPS entries. One warp reduces a program's sums without shared memory or barriers."""
LOADS = 4
"""Tiles a pass's thread reads before it sums any: 64 bytes in flight a thread (the bandwidth asks
for ~35 KB an SM: 4.8 TB/s x ~1 us / 132 SMs)."""

if triton is not None:
    from triton.language.extra import libdevice

    # libdevice's expf is the one torch's CUDA kernels call; Triton's interpreter (the CPU checks)
    # has no libdevice, and numpy's exp stands in for it there
    _math = tl.math if os.environ.get("TRITON_INTERPRET") == "1" else libdevice

    @triton.jit
    def _narrow(
        part, row, rows, chunks, top_p, low, high, S, CHUNKS: tl.constexpr, W: tl.constexpr
    ):
        """[low, high) narrowed by pass S's masses to the part whose low end holds top_p; and the
        way of pass S that tested the new low end (its masses are the kept ones)."""
        ways = tl.arange(0, W)
        chunk = tl.arange(0, CHUNKS)
        at = ((S * rows + row) * CHUNKS + chunk)[:, None] * W + ways[None, :]
        mass = tl.sum(tl.load(part + at, mask=(chunk < chunks)[:, None], other=0.0), axis=0)
        below = low + (ways.to(tl.int64) * (high - low)) // W
        enough = (mass >= top_p) | (ways == 0)  # mass at or above `low` is enough throughout
        new_low = tl.max(tl.where(enough, below, low), axis=0)
        high = tl.min(tl.where(enough, high, below), axis=0)
        way = tl.max(tl.where(enough & (below == new_low), ways, 0), axis=0)
        return new_low, high, way

    @triton.jit
    def _interval(
        part, bounds, row, rows, chunks, top_p, STEP: tl.constexpr, CHUNKS: tl.constexpr,
        W: tl.constexpr,
    ):  # fmt: skip
        """The interval pass STEP tests ([0, 1.0's bits + 1) for pass 0): the one pass STEP-1
        tested, stored by its chunk 0, narrowed by its masses; and the kept way (`_narrow`)."""
        low = tl.full([], 0, tl.int64)
        high = tl.full([], 0x3F800001, tl.int64)  # 1.0's bits + 1: above every probability's
        way = tl.full([], 0, tl.int32)
        if STEP >= 2:
            low = tl.load(bounds + ((STEP - 1) * rows + row) * 2)
            high = tl.load(bounds + ((STEP - 1) * rows + row) * 2 + 1)
        if STEP >= 1:
            low, high, way = _narrow(part, row, rows, chunks, top_p, low, high, STEP - 1, CHUNKS, W)
        return low, high, way

    @triton.jit
    def _edges(low, high, W: tl.constexpr):
        """The `W` thresholds a pass tests, spread over [low, high) from `low` up, as floats
        (non-negative floats order as their bits)."""
        edges = ()
        for w in tl.static_range(W):
            bits = (low + (w * (high - low)) // W).to(tl.int32)
            edges = edges + (bits.to(tl.float32, bitcast=True),)
        return edges

    @triton.jit
    def _tile_at(start, TILE: tl.constexpr):
        """A tile's offsets as [threads, 4]: 4 contiguous entries a thread, one 128-bit read."""
        return start + tl.arange(0, TILE // 4)[:, None] * 4 + tl.arange(0, 4)[None, :]

    @triton.jit
    def _add_masses(sums, p, edges, W: tl.constexpr):
        """Each threshold's sums plus the tile's entries at or above it, each entry's own slot."""
        out = ()
        for w in tl.static_range(W):
            out = out + (tl.where(p >= edges[w], sums[w] + p, sums[w]),)
        return out

    @triton.jit
    def _store_masses(part, sums, row, chunk, rows, S, CHUNKS: tl.constexpr, W: tl.constexpr):
        for w in tl.static_range(W):
            mass = tl.sum(tl.sum(sums[w], axis=1), axis=0)
            tl.store(part + ((S * rows + row) * CHUNKS + chunk) * W + w, mass)

    @triton.jit
    def _zeros(TILE: tl.constexpr, W: tl.constexpr):
        sums = ()
        for _ in tl.static_range(W):
            sums = sums + (tl.zeros([TILE // 4, 4], dtype=tl.float32),)
        return sums

    @triton.jit
    def mass_kernel(
        probs, part, bounds, vocab, rows, chunks, top_p, STEP: tl.constexpr,
        CHUNK: tl.constexpr, CHUNKS: tl.constexpr, W: tl.constexpr, TILE: tl.constexpr,
        LOADS: tl.constexpr,
    ):  # fmt: skip
        row, chunk = tl.program_id(0), tl.program_id(1)
        low, high, _ = _interval(part, bounds, row, rows, chunks, top_p, STEP, CHUNKS, W)
        if STEP >= 1:
            if chunk == 0:
                tl.store(bounds + (STEP * rows + row) * 2, low)
                tl.store(bounds + (STEP * rows + row) * 2 + 1, high)
        edges = _edges(low, high, W)
        sums = _zeros(TILE, W)
        base = probs + row.to(tl.int64) * vocab
        for offset in range(0, CHUNK, TILE * LOADS):
            tiles = ()
            for u in tl.static_range(LOADS):  # every read issued before any is waited on
                at = _tile_at(chunk * CHUNK + offset + u * TILE, TILE)
                tiles = tiles + (tl.load(base + at, mask=at < vocab, other=0.0),)
            for u in tl.static_range(LOADS):
                sums = _add_masses(sums, tiles[u], edges, W)
        _store_masses(part, sums, row, chunk, rows, STEP, CHUNKS, W)

    @triton.jit
    def stats_kernel(
        logits, stats, vocab, inv_t, CHUNK: tl.constexpr, CHUNKS: tl.constexpr,
        SPAN: tl.constexpr,
    ):  # fmt: skip
        """The chunk's max of `logits * inv_t` and sum of exp(each - that max), read twice (the
        second time from L2); a chunk of -inf alone sums to 0 (not exp(-inf - -inf), NaN)."""
        row, chunk = tl.program_id(0), tl.program_id(1)
        base = logits + row.to(tl.int64) * vocab
        top = tl.full([SPAN], float("-inf"), tl.float32)
        for offset in range(0, CHUNK, SPAN):
            at = chunk * CHUNK + offset + tl.arange(0, SPAN)
            x = tl.load(base + at, mask=at < vocab, other=float("-inf")).to(tl.float32) * inv_t
            top = tl.maximum(top, x)
        top = tl.max(top, axis=0)
        shift = tl.where(top == float("-inf"), 0.0, top)
        total = tl.zeros([SPAN], dtype=tl.float32)
        for offset in range(0, CHUNK, SPAN):
            at = chunk * CHUNK + offset + tl.arange(0, SPAN)
            x = tl.load(base + at, mask=at < vocab, other=float("-inf")).to(tl.float32) * inv_t
            total += _math.exp(x - shift)
        tl.store(stats + (row * CHUNKS + chunk) * 2, top)
        tl.store(stats + (row * CHUNKS + chunk) * 2 + 1, tl.sum(total, axis=0))

    @triton.jit
    def probs_kernel(
        logits, probs, stats, part, vocab, rows, chunks, inv_t, CHUNK: tl.constexpr,
        CHUNKS: tl.constexpr, W: tl.constexpr, TILE: tl.constexpr, LOADS: tl.constexpr,
    ):  # fmt: skip
        """exp(x * inv_t - max) / sum, the row's max and sum from its chunks' (`stats_kernel`),
        and pass 0's masses (W of them; none for W = 0)."""
        row, chunk = tl.program_id(0), tl.program_id(1)
        index = tl.arange(0, CHUNKS)
        real = index < chunks
        tops = tl.load(stats + (row * CHUNKS + index) * 2, mask=real, other=float("-inf"))
        sums = tl.load(stats + (row * CHUNKS + index) * 2 + 1, mask=real, other=0.0)
        top = tl.max(tops, axis=0)
        total = tl.sum(tl.where(real, sums * _math.exp(tops - top), 0.0), axis=0)
        edges = _edges(tl.full([], 0, tl.int64), tl.full([], 0x3F800001, tl.int64), W)
        masses = _zeros(TILE, W)
        base = row.to(tl.int64) * vocab
        for offset in range(0, CHUNK, TILE * LOADS):
            tiles = ()
            for u in tl.static_range(LOADS):  # every read issued before any is waited on
                at = _tile_at(chunk * CHUNK + offset + u * TILE, TILE)
                tiles = tiles + (tl.load(logits + base + at, mask=at < vocab, other=-float("inf")),)
            for u in tl.static_range(LOADS):
                at = _tile_at(chunk * CHUNK + offset + u * TILE, TILE)
                x = tiles[u].to(tl.float32) * inv_t
                p = tl.div_rn(_math.exp(x - top), total)
                tl.store(probs + base + at, p, mask=at < vocab)
                masses = _add_masses(masses, p, edges, W)  # past the vocabulary: exp(-inf)
        _store_masses(part, masses, row, chunk, rows, 0, CHUNKS, W)

    @triton.jit
    def pick_kernel(
        probs, part, bounds, uniform, out, floor, vocab, rows, chunks, top_p,
        STEPS: tl.constexpr, CHUNK: tl.constexpr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr,
        W: tl.constexpr, PICK: tl.constexpr,
    ):  # fmt: skip
        row, chunk = tl.program_id(0), tl.program_id(1)
        low, _, way = _interval(part, bounds, row, rows, chunks, top_p, STEPS, CHUNKS, W)
        if chunk == 0:
            tl.store(floor + row, low.to(tl.int32))
        if PICK:
            index = tl.arange(0, CHUNKS)
            slot = (((STEPS - 1) * rows + row) * CHUNKS + index) * W + way
            kept = tl.load(part + slot, mask=index < chunks, other=0.0)
            # the running sum in chunk order, one add at a time: monotone, and a chunk without
            # kept mass gets an empty share [start, start). tl.cumsum's parallel scan rounded one
            # such chunk a share of one float32 unit, it claimed a uniform next to 1 and wrote
            # token -1 (prompt_policy on an H200, issue 56: a device-side assert in the embedding)
            total = tl.full([], 0.0, tl.float32)
            start_mass = tl.full([], 0.0, tl.float32)
            end = tl.full([], 0.0, tl.float32)
            for c in tl.static_range(CHUNKS):
                after = total + tl.sum(tl.where(index == c, kept, 0.0), axis=0)
                start_mass = tl.where(chunk == c, total, start_mass)
                end = tl.where(chunk == c, after, end)
                total = after
            target = tl.load(uniform + row) * total
            # [start_mass, end) partition [0, total) exactly; a target rounded up to the total goes
            # to the last chunk holding mass
            mine = (start_mass <= target) & ((target < end) | ((target >= total) & (end == total)))
            if mine & (start_mass < end):
                edge = low.to(tl.int32).to(tl.float32, bitcast=True)
                base = probs + row.to(tl.int64) * vocab
                running = start_mass
                first = tl.full([], 0, tl.int32) + vocab
                last = tl.full([], -1, tl.int32)
                for offset in range(0, CHUNK, BLOCK):
                    at = chunk * CHUNK + offset + tl.arange(0, BLOCK)
                    p = tl.load(base + at, mask=at < vocab, other=0.0)
                    q = tl.where(p >= edge, p, 0.0)
                    sums = running + tl.cumsum(q, axis=0)
                    first = tl.minimum(first, tl.min(tl.where(sums > target, at, vocab), axis=0))
                    last = tl.maximum(last, tl.max(tl.where(q > 0.0, at, -1), axis=0))
                    running = tl.max(sums, axis=0)
                # rounding can leave the chunk's own running sum at or below the target (its kept
                # mass was summed in another order): its last token
                tl.store(out + row, tl.where(first < vocab, first, last).to(tl.int64))


def _reciprocal(temperature: float) -> float:
    """1 / temperature in float32, as torch's CUDA division by a Python number computes it: it
    multiplies by the reciprocal (BinaryDivTrueKernel.cu; the CPU divides)."""
    one = torch.tensor(1.0, dtype=torch.float32)
    return float(one / torch.tensor(temperature, dtype=torch.float32))


def _run(
    source: torch.Tensor, is_logits: bool, temperature: float, top_p: float,
    uniform: torch.Tensor | None, ways: int, chunk: int, warps: int, loads: int, fused: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:  # fmt: skip
    """(floor bits, token or None, probabilities) from logits (softmax first) or probabilities."""
    source = source.contiguous()
    rows, vocab = source.shape
    tile = 4 * 32 * warps
    if chunk % (tile * loads) or chunk % BLOCK:
        raise ValueError(f"chunk {chunk} is not a multiple of 4 x 32 x warps x loads and {BLOCK}")
    chunks = -(-vocab // chunk)
    padded = 1 << (chunks - 1).bit_length()
    steps = passes(ways) if top_p < 1.0 else 1
    # top_p >= 1: only pass 0's way 0 (floor 0, every probability kept) is enough
    limit = float(top_p) if top_p < 1.0 else float("inf")
    device, grid = source.device, (rows, chunks)
    part = torch.empty((steps, rows, padded, ways), device=device)
    bounds = torch.empty((steps, rows, 2), dtype=torch.int64, device=device)
    sizes = {"CHUNK": chunk, "CHUNKS": padded}
    probs, first = source, 0
    if is_logits:
        stats = torch.empty((rows, padded, 2), device=device)
        probs = torch.empty((rows, vocab), device=device)
        inv_t = _reciprocal(temperature)
        exact = {"enable_fp_fusion": False, "num_warps": warps}  # x * inv_t - max: two roundings
        stats_kernel[grid](source, stats, vocab, inv_t, SPAN=tile * loads, **sizes, **exact)
        probs_kernel[grid](
            source, probs, stats, part, vocab, rows, chunks, inv_t,
            W=ways if fused else 0, TILE=tile, LOADS=loads, **sizes, **exact,
        )  # fmt: skip
        first = 1 if fused else 0
    for step in range(first, steps):
        mass_kernel[grid](
            probs, part, bounds, vocab, rows, chunks, limit, STEP=step, W=ways, TILE=tile,
            LOADS=loads, num_warps=warps, **sizes,
        )  # fmt: skip
    floor = torch.empty(rows, dtype=torch.int32, device=device)
    # zeros: a row no chunk claims (all NaN) picks token 0, as the torch form does
    out = None if uniform is None else torch.zeros(rows, dtype=torch.int64, device=device)
    pick_kernel[(rows, chunks if uniform is not None else 1)](
        probs, part, bounds, uniform.float().contiguous() if uniform is not None else floor, out,
        floor, vocab, rows, chunks, limit, STEPS=steps, BLOCK=BLOCK, W=ways,
        PICK=uniform is not None, **sizes,
    )  # fmt: skip
    return floor, out, probs


def nucleus_floor(
    probs: torch.Tensor, top_p: float, ways: int = WAYS, *, chunk: int = CHUNK,
    warps: int = WARPS, loads: int = LOADS,
) -> torch.Tensor:  # fmt: skip
    """`device_sampler.torch_nucleus_floor`'s value, [rows, 1]."""
    tuning = (ways, chunk, warps, loads, False)
    return _run(probs, False, 1.0, top_p, None, *tuning)[0].view(torch.float32)[:, None]


def pick(
    probs: torch.Tensor, uniform: torch.Tensor, top_p: float, ways: int = WAYS, *,
    chunk: int = CHUNK, warps: int = WARPS, loads: int = LOADS,
) -> torch.Tensor:  # fmt: skip
    """Per row the token inverse CDF over the nucleus picks for `uniform`: the first whose running
    sum of kept probabilities, in vocabulary order, exceeds `uniform * the kept total`."""
    tuning = (ways, chunk, warps, loads, False)
    return _run(probs, False, 1.0, top_p, uniform, *tuning)[1]  # type: ignore[return-value]


def softmax(
    logits: torch.Tensor, temperature: float, *, chunk: int = CHUNK, warps: int = WARPS,
    loads: int = LOADS,
) -> torch.Tensor:  # fmt: skip
    """`softmax(logits.float() / temperature)` as torch computes it on a GPU, from logits of any
    float dtype: x * (1 / t) in float32 (torch's CUDA division by a number), exp(. - max) by
    libdevice's expf, divided by the sum. Only the sum differs: it is each chunk's sum of exp(. -
    its max), scaled by exp(its max - max) and added over the chunks, where torch adds in its own
    order; every probability of a row shares that one divisor, within a few float32 units of
    torch's (H200, 128 x 151,936: 66-71% of them the same bits, none 3.5e-7 apart). Results torch
    leaves subnormal (below 2**-126) may be zero: libdevice flushes them. (It runs a pass and the
    floor besides: a check's entry, not decoding's.)"""
    tuning = (WAYS, chunk, warps, loads, False)
    return _run(logits, True, temperature, 1.0, None, *tuning)[2]


def sample(
    logits: torch.Tensor, uniform: torch.Tensor, temperature: float, top_p: float,
    ways: int = WAYS, *, chunk: int = CHUNK, warps: int = WARPS, loads: int = LOADS,
    fused: bool = True,
) -> torch.Tensor:  # fmt: skip
    """`pick(softmax(logits, temperature), uniform, top_p)`; `fused`: pass 0's masses summed as
    the softmax writes the probabilities, one read of them fewer (else a pass of its own)."""
    tuning = (ways, chunk, warps, loads, fused)
    return _run(logits, True, temperature, top_p, uniform, *tuning)[1]  # type: ignore[return-value]
