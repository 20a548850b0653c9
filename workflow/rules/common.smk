# Shared by the rules: the params file the stages run on.
from orchestry.bookkeeping import fingerprint
from orchestry.params import parse_params
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


# Each rule's code input is its stage's fingerprint for these params (results/fingerprints/<stage>.txt),
# written here when its text changes, so a rule reruns when the code it runs changes and for no other edit.
fingerprint.write_all(parse_params(config))


def stage_code(stage):
    """The rule's code input: its stage's fingerprint (orchestry/bookkeeping/fingerprint.py)."""
    return str(fingerprint.path(stage))
