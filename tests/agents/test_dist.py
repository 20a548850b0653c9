"""Data-parallel update in real processes (gloo on the CPU): two ranks holding half the rows each
step exactly as one process holding all of them; one process without a launcher runs no collective."""

import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from conftest import converted_model, cpu_params

from orchestry.agents.lora import base_model
from orchestry.agents.lora.dist import ONE_PROCESS, end_world, start_world, world_from_env
from orchestry.agents.lora.team import TeamPolicy
from orchestry.algos.magrpo import Row
from orchestry.algos.pg_update import Optimizers, update_agents
from orchestry.stages.from_params import make_policy
from orchestry.stages.train_from_params import optimizer_settings, update_settings

AGENTS = ["aux", "main"]
PATHS = ["peft", "written"]
STEPS = 2  # the second step also checks that every rank's AdamW state moved alike


def params(path: str = "peft"):
    # micro-batches of 2 rows: each rank's chunks are the single process's chunks, so the summed
    # gradient is c_A + c_B on both sides and only the all-reduce stands between them. The
    # written-out update (the GPU's, agents/lora/cuda/written_update.py) runs without checkpointing.
    checkpointing = {"model": {"gradient_checkpointing": False}} if path == "written" else {}
    return cpu_params({"train": {"microbatch": 2, "warmup_steps": 0}, **checkpointing})


def step_rows(policy: TeamPolicy) -> dict[str, list[Row]]:
    """One step's rows: main's four split two and two; aux's only on rank 0 (one has A == 0)."""
    aux = policy.prompt_ids("aux", [{"role": "user", "content": "Write aux(x): return x + 1."}])
    main = policy.prompt_ids("main", [{"role": "user", "content": "Write main(x) using aux."}])
    return {
        "aux": [(aux, [9, 10, 11], 1.0), (aux, [12, 13], -1.0), (aux, [14, 15], 0.0)],
        "main": [
            (main, [20, 21, 22, 23], 0.75),
            (main, [24, 25], -0.25),
            (main, [26, 27, 28], -1.0),
            (main, [29], 0.5),
        ],
    }


def rank_share(rows: dict[str, list[Row]], rank: int) -> dict[str, list[Row]]:
    if rank == 0:
        return {"aux": rows["aux"], "main": rows["main"][:2]}
    return {"aux": [], "main": rows["main"][2:]}  # no aux row: it must still join every collective


Adapters = dict[str, dict[str, torch.Tensor]]


def train_steps(rank_rows, ranks, path: str) -> tuple[Adapters, Adapters, list[dict]]:
    """The adapters before and after STEPS updates, and each update's stats."""
    p = params(path)
    policy = make_policy(p)
    policy.update_path = path
    start = {a: policy.adapter_state(a) for a in AGENTS}  # copies
    opts = Optimizers.create(policy, AGENTS, False, optimizer_settings(p), total=STEPS)
    rows = rank_rows(step_rows(policy))
    stats = [update_agents(policy, opts, rows, update_settings(p), ranks) for _ in range(STEPS)]
    return start, {a: policy.adapter_state(a) for a in AGENTS}, stats


def rank_main(rank: int, size: int, port: int, out: str) -> None:
    """One gloo rank, placed by the environment torchrun would set; it steps on each update path
    in turn (one pair of rank processes for both: each start costs a torch import and more)."""
    rank_env(rank, size, port)
    torch.set_num_threads(1)
    world = start_world("cpu")
    try:
        assert (world.rank, world.size) == (rank, size)
        for path in PATHS:
            _, adapters, stats = train_steps(lambda rows: rank_share(rows, rank), world, path)
            torch.save({"adapters": adapters, "stats": stats}, Path(out) / f"{path}-rank{rank}.pt")
    finally:
        end_world(world)


def rank_env(rank: int, size: int, port: int) -> None:
    """The environment torchrun gives a rank."""
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


def convert_on_rank_1(rank: int, size: int, port: int, cache: str) -> None:
    """Rank 1 converts the embedded model into an empty cache while rank 0 waits."""
    rank_env(rank, size, port)
    torch.set_num_threads(1)
    world = start_world("cpu")
    try:
        if rank == 1:
            folder = Path(cache) / base_model.EMBEDDED_MODEL
            base_model.convert_gguf_model(base_model.embedded_gguf_path(), folder)
        torch.distributed.barrier()
    finally:
        end_world(world)


@pytest.mark.slow
def test_a_rank_other_than_0_converting_the_model_writes_its_weights(tmp_path):
    """On a fresh cache the first model load may be a multi-process stage's (`train.processes: 2`
    right after `prepare`): every rank converts the GGUF model. In a process group transformers'
    `save_pretrained` writes the weights and config on rank 0 alone; when the conversion used it,
    another rank's folder of tokenizer files could be renamed into place, often first, and every
    later load of it failed ("Unrecognized model ... Should have a `model_type` key") until it was
    deleted. The conversion now writes every file on every rank (base_model.save_plain_model)."""
    mp.spawn(convert_on_rank_1, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    folder = tmp_path / base_model.EMBEDDED_MODEL
    assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two gloo ranks run once for the module, each path's files apart (`{path}-rank{r}.pt`)."""
    out = tmp_path_factory.mktemp("ranks")
    converted_model()  # once, before the ranks load it
    mp.spawn(rank_main, args=(2, free_port(), str(out)), nprocs=2, join=True)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_two_gloo_ranks_step_like_one_process(rank_results, path):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each rank: the same kernels, the same rounding
    try:
        fresh, reference, ref_stats = train_steps(lambda rows: rows, None, path)
    finally:
        torch.set_num_threads(threads)
    ranks = [torch.load(rank_results / f"{path}-rank{r}.pt") for r in range(2)]
    for agent in AGENTS:
        start = fresh[agent]
        assert any(not torch.equal(start[k], reference[agent][k]) for k in start), "no step taken"
        for key, want in reference[agent].items():
            for r in ranks:
                got = r["adapters"][agent][key]
                assert torch.allclose(got, want, rtol=0, atol=1e-6), (agent, key)
            assert torch.equal(ranks[0]["adapters"][agent][key], ranks[1]["adapters"][agent][key])
    for step, want in enumerate(ref_stats):
        for r in ranks:
            assert r["stats"][step].keys() == want.keys()
            for key, value in want.items():
                assert r["stats"][step][key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_without_a_launcher_the_world_is_one_process_and_collectives_are_no_ops(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    world = start_world("cpu")
    assert world == ONE_PROCESS and world.is_main
    assert not torch.distributed.is_initialized()
    assert world.sum_values([1, 2.5]) == [1.0, 2.5]
    assert world.gather({"a": 1}) == [{"a": 1}] and world.share(3) == 3
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.full((2,), 0.5)
    world.sum_grads([p])
    assert torch.equal(p.grad, torch.full((2,), 0.5))
    end_world(world)


def test_a_half_set_launcher_environment_is_named():
    with pytest.raises(RuntimeError, match="MASTER_ADDR, MASTER_PORT"):
        world_from_env({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
