"""The params Snakemake resolved (params.yaml + `--config` / `--configfile`), handed to the stages.

Snakemake merges its command-line overrides into `config`, and the rules' `params:` (the rerun
triggers) see them, but a stage reads its params from a file. Without this, `snakemake --configfile
small.yaml` would rerun the stages and then run them on params.yaml: other settings than asked. The
Snakefile calls `resolved_params_file(config)` once per invocation and passes `--params FILE` to every
`python -m orchestry` it runs.

The file is named by a hash of its content, so every Snakemake process that resolves the same config
(the main one, and the one the SLURM executor starts inside each cluster job with the same overrides)
writes the same file under the same name, atomically; none can overwrite another's with other settings.
This module is not imported by any stage, so changing it reruns none (it is outside every stage's code
dependencies).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from orchestry.io import write_text
from orchestry.params.loading import ParamsError, load_params, parse_params

# Snakemake's own state folder (git-ignored), not a pipeline output: paths.py names those.
RESOLVED_DIR = Path(".snakemake/orchestry")
SOURCE = "Snakemake config (params.yaml with --config/--configfile overrides)"


def resolve_config(
    config: dict[str, Any],
    params_yaml: str | Path = "params.yaml",
    folder: str | Path = RESOLVED_DIR,
) -> Path | None:
    """Validate Snakemake's `config` and give it the schema's types, in place; return the params file.

    Raises ParamsError (one line naming the key) when `config` does not match the schema. The typed
    values matter because `--config 'train={max_steps: 2}'` reaches Snakemake as the string "2": the
    rules' `params:` (the rerun triggers) then hold what the stage runs. Returns None when the config
    means what `params_yaml` says: the stages read params.yaml and their commands stay those of dvc.yaml.
    """
    resolved = parse_params(config, SOURCE)
    config.update(resolved.model_dump(mode="json"))
    try:
        if resolved == load_params(params_yaml):
            return None
    except ParamsError:  # params.yaml missing or bad, the overrides complete it: run on those
        pass
    text = yaml.safe_dump(resolved.model_dump(mode="json"), sort_keys=True)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    path = Path(folder) / f"params-{digest}.yaml"
    write_text(path, f"# {SOURCE}; written by the Snakefile\n{text}")
    return path
