# Shared by the rules: the params file the stages run on.
from orchestry.params.resolved import resolve_config

# The stages run on exactly the params Snakemake resolved, overrides included (--config, --configfile):
# a bad key stops here with one line naming it; a config other than params.yaml goes to a file named by
# its hash (the SLURM executor's Snakemake inside each job resolves the same config to the same file).
RESOLVED_PARAMS = resolve_config(config)


def params_option(wildcards, input):
    """` --params FILE` for `python -m orchestry`; '' when the config is params.yaml (dvc.yaml's commands).

    A function of `input`, which Snakemake leaves out of the params rerun trigger: each rule's sections
    are that trigger, and the file's name changes with every section, also those the rule does not read.
    """
    return f" --params {RESOLVED_PARAMS}" if RESOLVED_PARAMS else ""
