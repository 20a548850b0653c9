"""`device_sampler.draw`'s top-p nucleus and inverse-CDF pick on a GPU, as Triton kernels.

The torch form (device_sampler.py) bisects the float bits of the probabilities, ~5 kernels over the
whole [rows, vocab] tensor a step, then a cumsum over the vocabulary (251 us a token at the 3B
shape). A first kernel did the bisection with one program per row, 31 passes over its row: 3.7 ms a
token at 128 rows x 151,936 entries (0.47 s of a 1.53 s generation; issue 36), one SM's bandwidth a
row. Here every launch runs rows x vocabulary chunks programs, and each pass tests `WAYS` thresholds
at once, so `passes(WAYS)` passes find the floor:

- `mass_kernel`, pass s: each program rebuilds the row's search interval from the passes before it
  (`_interval`: the same sums in the same order in every program, so all agree) and writes the mass
  its chunk holds at or above each of `WAYS` thresholds spread over the interval.
- `kept_kernel`: the floor (the interval's low end after the last pass) and each chunk's kept mass.
- `pick_kernel`: the chunk whose share of the kept mass's running sum holds `uniform * total`
  scans itself and writes the first token whose running sum exceeds it.
"""

from __future__ import annotations

import torch

from orchestry.agents.lora.triton_support import tl, triton

WAYS = 8
"""Thresholds tested a pass: the interval shrinks 8-fold, so 10 passes find the floor. Fewer
thresholds make a pass cheaper, but less than in proportion, and need more passes: on an H200 at
128 rows, 8 is the fastest of 4, 8 and 16 at both the 3B and the 135M vocabularies
(benchmarks/decode_kernels.py, results/bench/decode_kernels.json)."""
BITS = 30
"""The interval starts at [0, bits of 1.0 + 1), under 2**30 wide."""


def passes(ways: int) -> int:
    """Passes that shrink the interval to one value: ceil-dividing 2**30 by `ways` that often."""
    n = 0
    while ways**n < 2**BITS:
        n += 1
    return n


CHUNK = 8192
"""Vocabulary entries a program covers (151,936 -> 19 chunks a row)."""
BLOCK = 256
"""Entries a program reads at a time (x `WAYS` comparisons held in registers)."""


if triton is not None:

    @triton.jit
    def _thresholds(low, high, W: tl.constexpr):
        """The `W` thresholds a pass tests, spread over [low, high) from `low` up."""
        return low + (tl.arange(0, W).to(tl.int64) * (high - low)) // W

    @triton.jit
    def _interval(
        part, row, rows, top_p, STEPS: tl.constexpr, CHUNKS: tl.constexpr, W: tl.constexpr
    ):
        low = tl.full([], 0, tl.int64)
        high = tl.full([], 0x3F800001, tl.int64)  # 1.0's bits + 1: above every probability's
        ways = tl.arange(0, W)
        chunk = tl.arange(0, CHUNKS)
        for s in tl.static_range(STEPS):
            at = ((s * rows + row) * CHUNKS + chunk)[:, None] * W + ways[None, :]
            mass = tl.sum(tl.load(part + at), axis=0)
            below = _thresholds(low, high, W)
            enough = (mass >= top_p) | (ways == 0)  # mass at or above `low` is enough throughout
            new_low = tl.max(tl.where(enough, below, low), axis=0)
            high = tl.min(tl.where(enough, high, below), axis=0)
            low = new_low
        return low, high

    @triton.jit
    def mass_kernel(
        probs, part, vocab, rows, top_p, STEP: tl.constexpr,
        CHUNK: tl.constexpr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr, W: tl.constexpr,
    ):  # fmt: skip
        row, chunk = tl.program_id(0), tl.program_id(1)
        low, high = _interval(part, row, rows, top_p, STEP, CHUNKS, W)
        below = _thresholds(low, high, W)
        # non-negative floats order as their bits: compare as floats, sum once at the end
        edge = below.to(tl.int32).to(tl.float32, bitcast=True)
        acc = tl.zeros([BLOCK, W], dtype=tl.float32)
        base = probs + row.to(tl.int64) * vocab
        for offset in range(0, CHUNK, BLOCK):
            at = chunk * CHUNK + offset + tl.arange(0, BLOCK)
            p = tl.load(base + at, mask=at < vocab, other=0.0)
            acc += tl.where(p[:, None] >= edge[None, :], p[:, None], 0.0)
        mass = tl.sum(acc, axis=0)
        tl.store(part + ((STEP * rows + row) * CHUNKS + chunk) * W + tl.arange(0, W), mass)

    @triton.jit
    def kept_kernel(
        probs, part, kept, floor, vocab, rows, top_p, STEPS: tl.constexpr,
        CHUNK: tl.constexpr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr, W: tl.constexpr,
    ):  # fmt: skip
        row, chunk = tl.program_id(0), tl.program_id(1)
        low, _ = _interval(part, row, rows, top_p, STEPS, CHUNKS, W)
        edge = low.to(tl.int32).to(tl.float32, bitcast=True)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        base = probs + row.to(tl.int64) * vocab
        for offset in range(0, CHUNK, BLOCK):
            at = chunk * CHUNK + offset + tl.arange(0, BLOCK)
            p = tl.load(base + at, mask=at < vocab, other=0.0)
            acc += tl.where(p >= edge, p, 0.0)
        tl.store(kept + row * CHUNKS + chunk, tl.sum(acc, axis=0))
        if chunk == 0:
            tl.store(floor + row, low.to(tl.int32))

    @triton.jit
    def pick_kernel(
        probs, kept, floor, uniform, out, vocab,
        CHUNK: tl.constexpr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        row, chunk = tl.program_id(0), tl.program_id(1)
        index = tl.arange(0, CHUNKS)
        upto = tl.cumsum(tl.load(kept + row * CHUNKS + index), axis=0)
        total = tl.max(upto, axis=0)  # running sums of non-negative values: the last is the largest
        end = tl.sum(tl.where(index == chunk, upto, 0.0), axis=0)
        start_mass = tl.sum(tl.where(index == chunk - 1, upto, 0.0), axis=0)
        target = tl.load(uniform + row) * total
        # [start_mass, end) partition [0, total) exactly; a target rounded up to the total goes to
        # the last chunk holding mass
        mine = (start_mass <= target) & ((target < end) | ((target >= total) & (end == total)))
        if mine & (start_mass < end):
            edge = tl.load(floor + row).to(tl.float32, bitcast=True)
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
            # rounding can leave the chunk's own running sum at or below the target: its last token
            tl.store(out + row, tl.where(first < vocab, first, last).to(tl.int64))


def _launch(
    probs: torch.Tensor, top_p: float, uniform: torch.Tensor | None, ways: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    probs = probs.contiguous()
    rows, vocab = probs.shape
    chunks = -(-vocab // CHUNK)
    padded = 1 << (chunks - 1).bit_length()
    steps = passes(ways) if top_p < 1.0 else 0
    # unused chunks' slots stay zero: they add nothing to the sums
    part = torch.zeros((max(steps, 1), rows, padded, ways), device=probs.device)
    kept = torch.zeros((rows, padded), device=probs.device)
    floor = torch.empty(rows, dtype=torch.int32, device=probs.device)
    sizes = {"CHUNK": CHUNK, "CHUNKS": padded, "BLOCK": BLOCK}
    for step in range(steps):
        mass_kernel[(rows, chunks)](
            probs, part, vocab, rows, float(top_p), STEP=step, W=ways, **sizes
        )
    kept_kernel[(rows, chunks)](
        probs, part, kept, floor, vocab, rows, float(top_p), STEPS=steps, W=ways, **sizes
    )
    if uniform is None:
        return floor, None
    # zeros: a row no chunk claims (all NaN) picks token 0, as the torch form does
    out = torch.zeros(rows, dtype=torch.int64, device=probs.device)
    pick_kernel[(rows, chunks)](
        probs, kept, floor, uniform.float().contiguous(), out, vocab, **sizes
    )
    return floor, out


def nucleus_floor(probs: torch.Tensor, top_p: float, ways: int = WAYS) -> torch.Tensor:
    """`device_sampler.torch_nucleus_floor`'s value, [rows, 1]."""
    return _launch(probs, top_p, None, ways)[0].view(torch.float32)[:, None]


def pick(
    probs: torch.Tensor, uniform: torch.Tensor, top_p: float, ways: int = WAYS
) -> torch.Tensor:
    """Per row the token inverse CDF over the nucleus picks for `uniform`: the first whose running
    sum of kept probabilities, in vocabulary order, exceeds `uniform * the kept total`."""
    return _launch(probs, top_p, uniform, ways)[1]  # type: ignore[return-value]
