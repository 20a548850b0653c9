"""The adapters on disk: the same training writes the same files."""

import json
import os
import subprocess
import sys

from orchestry.agents.lora.adapter_files import steady_adapter_configs


def test_target_modules_are_listed_in_one_order_whatever_the_string_hashing(tmp_path):
    """peft lists a set: two processes with other hash seeds write the modules in other orders
    (seen in two tiny train runs); after steady_adapter_configs the files are the same bytes."""
    script = "import json, sys; print(json.dumps(list({'q_proj', 'k_proj', 'v_proj', 'o_proj'})))"
    orders = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(8)
    }
    assert len(orders) > 1  # the order does change from one process to the next
    written = set()
    for i, order in enumerate(sorted(orders)):
        folder = tmp_path / str(i) / "aux"
        folder.mkdir(parents=True)
        config = {"r": 8, "target_modules": json.loads(order)}
        (folder / "adapter_config.json").write_text(json.dumps(config))
        steady_adapter_configs(tmp_path / str(i))
        written.add((folder / "adapter_config.json").read_bytes())
    assert len(written) == 1
    assert json.loads(written.pop())["target_modules"] == ["k_proj", "o_proj", "q_proj", "v_proj"]
