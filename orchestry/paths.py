"""Every pipeline path, once, relative to the project root (where dvc and snakemake run).

dvc.yaml and workflow/rules/*.smk name the same files; tests/stages/test_pipeline.py checks that each
stage's declared outputs are the paths here.
"""

from __future__ import annotations

from pathlib import Path

# problem sets in the repository, and the prepared splits
PROBLEM_DIRS = {"coop": Path("data/coop"), "coop3": Path("data/coop3")}
# the text environments' tasks, written by the project (envs/story, envs/writing)
STORY_DATA = Path("data/story")
WRITING_DATA = Path("data/writing")
PREPARED = Path("data/prepared")
PREPARED_SUMMARY = PREPARED / "summary.json"
FINGERPRINTS = Path("results/fingerprints")  # <stage>.txt: the code each stage runs (deps)


def split(name: str) -> Path:
    """A prepared split: `train` or `test`."""
    return PREPARED / f"{name}.jsonl"


# stage outputs
SMOKE = Path("results/smoke/smoke.json")
# the supervised warm start (stage sft): the team's adapters and the single agent's
SFT = Path("results/sft")
SFT_TEAM = SFT / "team"
SFT_SINGLE = SFT / "single"
SFT_HISTORY = SFT / "history.csv"
SFT_METRICS = SFT / "metrics.json"


def warm_start(single: bool) -> Path:
    """The sft stage's adapters of the single agent (`single`) or of the team."""
    return SFT_SINGLE if single else SFT_TEAM


TRAIN = Path("results/train")
ADAPTERS = TRAIN / "adapters"
ROLLOUTS = TRAIN / "rollouts.jsonl"
HISTORY = TRAIN / "history.csv"
TRAIN_METRICS = TRAIN / "metrics.json"
TRAIN_LIVE = TRAIN / "live"
# the single agent trained the same way (stage train_single; evaluated as method `single_grpo`)
TRAIN_SINGLE = Path("results/train_single")
SINGLE_ADAPTERS = TRAIN_SINGLE / "adapters"
SINGLE_HISTORY = TRAIN_SINGLE / "history.csv"
SINGLE_METRICS = TRAIN_SINGLE / "metrics.json"
BASELINES = Path("results/baselines")
EVALUATE = Path("results/evaluate")
SCHEMES = Path("results/schemes")
PROMPT_POLICY = Path("results/prompt_policy")
PROMPTS = PROMPT_POLICY / "prompts.json"
LIBRARY = PROMPT_POLICY / "library.json"
PROMPT_POLICY_COST = PROMPT_POLICY / "cost.json"
BEAM = Path("results/beam")
BEAM_COST = BEAM / "cost.json"
# the opt-in orchestrate stage (optional/dvc.yaml)
ORCHESTRATE = Path("results/orchestrate")
ORCHESTRATE_METRICS = ORCHESTRATE / "metrics.json"
ORCHESTRATE_EPISODES = ORCHESTRATE / "episodes.jsonl"
ORCHESTRATE_HISTORY = ORCHESTRATE / "history.csv"
ORCHESTRATE_REPORTS = Path("reports/orchestrate")
REPORTS = Path("reports")
FIGURES = REPORTS / "figures"
RESULTS_MD = REPORTS / "results.md"
COMPARISON_CSV = REPORTS / "comparison.csv"
PAIRED_CSV = REPORTS / "paired.csv"  # the team against each method, paired by problem
SEED_RUNS = REPORTS / "seed_runs"
ABLATIONS = REPORTS / "ablations"
ABLATIONS_MD = REPORTS / "ablations.md"


def method_dir(method: str) -> Path:
    """Outputs of one evaluated method: a baseline's name, or `magrpo` for the trained team."""
    return EVALUATE if method == "magrpo" else BASELINES / method


def generations(method: str) -> Path:
    return method_dir(method) / "generations.jsonl"


def metrics(method: str) -> Path:
    return method_dir(method) / "metrics.json"


# Timings (tokens/s, seconds) differ between two runs of the same code: they are kept out of git and
# out of the DVC outs, one file per method or stage, beside the stages' logs (gitignored).
TIMINGS = Path("logs/timings")


def timing(name: str) -> Path:
    """The timing record of a method (its tokens/s and seconds per sample) or a training stage."""
    return TIMINGS / f"{name}.json"


# caches (not outputs: safe to delete)
CHECKPOINTS = Path("cache/checkpoints")
ANTHROPIC_CACHE = Path("cache/anthropic")
PARAMS_SCHEMA = Path("workflow/schemas/params.schema.json")
PARAMS_DOC = Path("docs/params.md")  # the params reference, generated from the schema
