"""The evaluation stages over data-parallel processes: each evaluates its share of the test problems.

With `evaluate.processes` N > 1, `python -m orchestry evaluate` (or `baseline --name X`) starts N
ranks under torch.distributed.run (`stages/launch.py`); under `torchrun` its `--nproc_per_node`
counts. Rank r loads its own copy of the model (on GPU r), answers test problems r, r + N, ... with
the method's protocol, sampling from its own stream (rank 0 as one process would), and scores them in
its own sandbox. Rank 0 gathers every rank's rows, puts them in the order one process makes (the
split's problem order, then the sample index) and alone writes the outputs.

One process (N = 1, no launcher) runs the protocol on every problem: the stage's code path before
sharding, bit for bit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from orchestry.agents.lora.base_model import device_type
from orchestry.agents.lora.dist import end_world, start_world
from orchestry.params import Params
from orchestry.stages.launch import launched_ranks

Rows = list[dict[str, Any]]
RowsOf = Callable[[Sequence[Any], int], Rows]
"""(this rank's test problems, rank) -> their rows; rank 0's sampling stream is one process's."""


def rows_in_shards(
    params: Params, stage: Sequence[str], tasks: Sequence[Any], rows_of: RowsOf
) -> Rows | None:
    """Every test problem's rows, on the process that writes the outputs (one process, or rank 0);
    None on the other ranks and on a process that only launched the ranks (they wrote the outputs).

    `stage` is the command line after `python -m orchestry` that starts one rank (`evaluate`, or
    `baseline --name X`). `rows_of` builds its generator inside the call: on CUDA each rank's GPU is
    chosen before it loads the model.
    """
    if launched_ranks(params, params.evaluate.processes, stage, "evaluate.processes"):
        return None
    world = start_world(device_type(params.model.device))
    try:
        if not world.is_main:  # rank 0 speaks for the stage
            logging.getLogger("orchestry").setLevel(logging.WARNING)
        mine = list(tasks[world.rank :: world.size])
        rows = rows_of(mine, world.rank) if mine else []
        parts = world.gather(rows)
    finally:
        end_world(world)
    if parts is None:
        return None
    return parts[0] if len(parts) == 1 else in_split_order(parts, tasks)


def in_split_order(parts: Sequence[Rows], tasks: Sequence[Any]) -> Rows:
    """The ranks' rows as one process orders them: by the problem's place in the split, then by
    sample index (each protocol returns its problems' samples 0..n-1 in turn)."""
    position = {task.id: i for i, task in enumerate(tasks)}
    rows = [row for part in parts for row in part]
    return sorted(rows, key=lambda row: (position[row["problem_id"]], row["sample"]))
