"""Start a stage as N data-parallel processes under torch.distributed.run (torchrun), and wait.

`python -m orchestry train` (or `evaluate`, `baseline --name X`) is the fixed command of dvc.yaml and
the Snakefile; `train.processes` (`evaluate.processes`) > 1 makes it the launcher of N ranks, each of
which finds its place in torchrun's environment (`orchestry.agents.lora.dist`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from orchestry.agents.lora.dist import under_launcher, world_from_env
from orchestry.algos.failure import TrainingFailed
from orchestry.params import Params

log = logging.getLogger("orchestry.stages.launch")


def launch_processes(params: Params, processes: int, stage: Sequence[str], key: str) -> None:
    """Run `python -m orchestry <stage...>` as `processes` data-parallel ranks under
    torch.distributed.run on this machine, and wait for them (TrainingFailed if they fail).

    dvc and snakemake run a stage's fixed command (`python -m orchestry train`, `... evaluate`):
    with its params `key` (`train.processes`, `evaluate.processes`) > 1 that command becomes the
    launcher of the real ones. The ranks read these very params (a temporary copy, so values this
    process was given on its command line carry over). Their stderr is copied line by line to this
    process's log handlers: the ranks get no --log, since N processes opening one log file for
    writing would truncate each other's lines.
    """
    threads = max(1, len(os.sched_getaffinity(0)) // processes)  # torchrun's default is 1
    env = {"OMP_NUM_THREADS": str(threads), **os.environ}
    sinks = [h.stream for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    with tempfile.TemporaryDirectory(prefix="orchestry-ranks-") as tmp:
        params_file = Path(tmp) / "params.yaml"
        params_file.write_text(yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += [f"--nproc_per_node={processes}", "-m", "orchestry"]
        command += ["--params", str(params_file), *stage]
        log.info("starting %d processes: %s", processes, " ".join(command))
        proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, bufsize=1)
        assert proc.stderr is not None
        for line in proc.stderr:
            for sink in sinks or [sys.stderr]:
                sink.write(line)
                sink.flush()
        code = proc.wait()
    if code != 0:
        raise TrainingFailed(
            f"the {processes} {stage[0]} processes ({key}) failed with exit code {code}; "
            "their messages are above"
        )


def launched_ranks(params: Params, wanted: int, stage: Sequence[str], key: str) -> bool:
    """True when this process was the launcher: it started `wanted` (the params `key`) > 1 ranks of
    `python -m orchestry <stage...>` and they are done. False when this process is to do the work
    itself: alone, or one rank under a launcher whose WORLD_SIZE agrees with `wanted` (a `wanted` of
    1 takes the launcher's number); TrainingFailed when it does not."""
    if wanted > 1 and not under_launcher():
        launch_processes(params, wanted, stage, key)
        return True
    size = world_from_env().size
    if wanted > 1 and wanted != size:
        raise TrainingFailed(
            f"{key} is {wanted} but the launcher started WORLD_SIZE={size} processes: make them "
            f"agree, or set {key} to 1 to take the launcher's number"
        )
    return False
