"""Data-parallel training processes: the process group from torchrun's environment, and its collectives.

`torchrun --nproc_per_node N` (or `python -m torch.distributed.run`) starts N copies of a stage and
tells each its place through the environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. `start_world` reads them and joins the process group: NCCL when the
model is on CUDA (each rank on its own GPU, cuda:LOCAL_RANK), gloo on a CPU. Without that
environment the world is one process, no process group exists, and every collective below returns
its input untouched, so a single process runs exactly the code it ran before data parallelism.

Every collective must be called by every rank in the same order; callers decide on values all ranks
share (global counts, reduced losses), never on what only one rank knows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

LAUNCHER_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""The environment a launcher sets for each process it starts."""

TIMEOUT = timedelta(minutes=30)
"""How long a collective waits for the slowest rank (a rollout step can take minutes on a CPU)."""


@dataclass(frozen=True)
class World:
    """This process's place among the data-parallel processes; its methods are the collectives.

    With `size == 1` every method is a no-op that hands its input back.
    """

    rank: int = 0
    """0 .. size-1; rank 0 writes the outputs, logs and checkpoints."""
    size: int = 1
    """Processes in the group (WORLD_SIZE)."""
    local_rank: int = 0
    """Rank on this machine: the GPU this process uses."""
    local_size: int = 1
    """Processes on this machine (they share its CPU cores)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum_values(self, values: Sequence[float]) -> list[float]:
        """Each value summed over the ranks (float64, one collective for all of them)."""
        if self.size == 1:
            return [float(v) for v in values]
        buffer = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_device())
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        return buffer.tolist()

    def sum_grads(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Replace each parameter's gradient by its sum over the ranks (a rank without a gradient adds
        zeros), through one flat buffer: one collective per optimizer instead of one per tensor."""
        if self.size == 1 or not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
            offset += n

    def copy_from_main(self, params: Sequence[torch.nn.Parameter]) -> None:
        """Overwrite every rank's parameters with rank 0's (one flat buffer), so all ranks start equal."""
        if self.size == 1 or not params:
            return
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in params])
            dist.broadcast(flat, src=0)
            if self.is_main:  # the source: its parameters are what was sent
                return
            offset = 0
            for p in params:
                n = p.numel()
                p.copy_(flat[offset : offset + n].view_as(p))
                offset += n

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's picklable `obj`, in rank order, on rank 0; None on the other ranks."""
        if self.size == 1:
            return [obj]
        out: list[Any] | None = [None] * self.size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def share(self, obj: Any) -> Any:
        """Rank 0's picklable `obj` on every rank (the others' argument is ignored)."""
        if self.size == 1:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        """Wait until every rank gets here."""
        if self.size > 1:
            dist.barrier()


ONE_PROCESS = World()
"""The world without a launcher: every collective is a no-op."""


def under_launcher(environ: Mapping[str, str] = os.environ) -> bool:
    """True when a launcher (torchrun) started this process: WORLD_SIZE is in the environment."""
    return "WORLD_SIZE" in environ


def world_from_env(environ: Mapping[str, str] = os.environ) -> World:
    """This process's place from torchrun's environment (the one-process world without it)."""
    if not under_launcher(environ):
        return World()
    missing = [k for k in LAUNCHER_KEYS if k not in environ]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE is set but {', '.join(missing)} not: start the processes with torchrun "
            "(or python -m torch.distributed.run), which sets all of "
            f"{', '.join(LAUNCHER_KEYS)}"
        )
    size = int(environ["WORLD_SIZE"])
    return World(
        rank=int(environ["RANK"]),
        size=size,
        local_rank=int(environ["LOCAL_RANK"]),
        local_size=int(environ.get("LOCAL_WORLD_SIZE", size)),
    )


def start_world(device_type: str, environ: Mapping[str, str] = os.environ) -> World:
    """Join the process group described by the environment: NCCL for a CUDA model, gloo for a CPU one.

    On CUDA this process's GPU becomes cuda:LOCAL_RANK (set before the model is loaded, so `cuda`
    means that GPU). One process (no launcher, or WORLD_SIZE=1) creates no group.
    """
    world = world_from_env(environ)
    if world.size == 1:
        return world
    if device_type == "cuda":
        if world.local_rank >= torch.cuda.device_count():
            raise RuntimeError(
                f"rank {world.rank} wants cuda:{world.local_rank} but this machine has "
                f"{torch.cuda.device_count()} GPUs: start at most one process per GPU"
            )
        torch.cuda.set_device(world.local_rank)
    if not dist.is_initialized():
        cuda = device_type == "cuda"
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            init_method="env://",
            rank=world.rank,
            world_size=world.size,
            timeout=TIMEOUT,
            # binds the communicator to this rank's GPU (barriers and object collectives use it)
            device_id=torch.device("cuda", world.local_rank) if cuda else None,
        )
    return world


def end_world(world: World) -> None:
    """Leave the process group (at the end of a stage, also after an error)."""
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def _device() -> torch.device:
    """Where collective buffers live: this rank's GPU under NCCL, the CPU under gloo."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
