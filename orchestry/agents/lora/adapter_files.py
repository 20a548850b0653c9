"""The team's adapters on disk: one peft folder per adapter plus policy.json, written atomically.

`TeamPolicy.save_adapters` / `load_adapters` (orchestry/agents/lora/team.py) decide what policy.json
records and whether a saved directory fits the policy; this module writes and reads the files.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from orchestry.agents.lora.loaded_base import LoadedBase

POLICY_FILE = "policy.json"


def write_adapters(directory: Path, bases: Iterable[LoadedBase], meta: Mapping[str, Any]) -> None:
    """Write directory/<adapter>/ for every adapter of `bases` and directory/policy.json (`meta`).

    The directory is built next to its final place and renamed into it, so a reader sees either
    the old directory or the complete new one."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = directory.parent / f".{directory.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for base in bases:
        # peft writes every adapter not named "default" to <dir>/<adapter name>/.
        base.model.save_pretrained(str(tmp), selected_adapters=base.adapters)
    steady_adapter_configs(tmp)
    (tmp / POLICY_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    old = directory.parent / f".{directory.name}.old-{os.getpid()}"
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def steady_adapter_configs(directory: Path) -> None:
    """Sort `target_modules` in every adapter_config.json under `directory`: peft keeps them in a
    set, so its file lists them in an order that changes from one Python process to the next (string
    hashing is salted), and the same training would write another adapters folder (another hash in
    dvc.lock)."""
    for path in sorted(directory.glob("**/adapter_config.json")):
        config = json.loads(path.read_text())
        if isinstance(config.get("target_modules"), list):
            config["target_modules"] = sorted(config["target_modules"])
            path.write_text(json.dumps(config, indent=2, sort_keys=True))


def read_policy_file(directory: Path) -> dict[str, Any]:
    """The policy.json written by `write_adapters`."""
    return json.loads((directory / POLICY_FILE).read_text())


def load_adapter_weights(directory: Path, bases: Iterable[LoadedBase]) -> None:
    """Copy directory/<adapter>/ weights into every adapter of `bases` in place.

    ValueError when a saved adapter's keys differ from the adapter's own."""
    for base in bases:
        for adapter in base.adapters:
            state = load_file(directory / adapter / "adapter_model.safetensors", device="cpu")
            expected = set(get_peft_model_state_dict(base.model, adapter_name=adapter))
            if set(state) != expected:
                raise ValueError(
                    f"{directory / adapter} does not match adapter {adapter!r}: "
                    f"missing {sorted(expected - set(state))[:3]}, "
                    f"unexpected {sorted(set(state) - expected)[:3]}"
                )
            set_peft_model_state_dict(base.model, state, adapter_name=adapter)
