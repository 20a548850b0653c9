"""The story, writing and code-review environments through the whole pipeline, selected by
`env.name` alone."""

import json

import pytest
import yaml
from conftest import ROOT, run_in

from orchestry.params import ParamsError, parse_params
from orchestry.stage_runs import stage_commands
from orchestry.stages.figures import FROZEN_METHODS


def test_env_name_alone_selects_the_environment_and_its_roles():
    assert parse_params({"env": {"name": "story"}}).model.agents == ["writer", "editor", "narrator"]
    assert parse_params({"env": {"name": "writing"}}).model.agents == ["first", "second"]
    assert parse_params({}).model.agents == ["aux", "main"]
    two = parse_params({"env": {"name": "story"}, "model": {"agents": ["writer", "narrator"]}})
    assert two.model.agents == ["writer", "narrator"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"env": {"name": "writing"}, "model": {"agents": ["a", "b", "c"]}}, "needs 2 agents"),
        ({"env": {"name": "story"}, "train": {"curriculum": "easy_first"}}, "needs env.name code"),
        (
            {"env": {"name": "story"}, "prepare": {"sets": {"coop": {"n_train": 1, "n_test": 1}}}},
            "no task set of env.name story",
        ),
        ({"env": {"name": "poem"}}, "env.name"),
        ({"env": {"story": {"turns_range": [6, 3]}}}, "turns_range"),
    ],
)
def test_settings_that_do_not_fit_the_environment_are_errors(overrides, message):
    with pytest.raises(ParamsError, match=message):
        parse_params(overrides)


def text_config(env: str, sets: set[str]) -> dict:
    """A tiny experiment config of a text environment: two tasks a split, two steps, two samples."""
    return {
        "env": {"name": env},
        "prepare": {"sets": {s: {"n_train": 2, "n_test": 2} for s in sets}},
        "train": {"max_steps": 2},
        "evaluate": {"n_samples": 2},
    }


def without_frozen_teams() -> list[str]:
    """`--only` and the pipeline's stages but the frozen-team ones (prompt_policy, beam): the story
    pipeline runs those for every text environment; the others leave them out to save minutes."""
    stages = [n for n, _ in stage_commands(ROOT / "dvc.yaml")]
    return ["--only", ",".join(s for s in stages if s not in ("prompt_policy", "beam"))]


def check_text_report(repo, name: str, config: dict, frozen_left_out: bool = False) -> None:
    """What `python -m orchestry.experiment` must have reported for a text environment's run
    (`frozen_left_out`: run with `without_frozen_teams()`)."""
    env, sets = config["env"]["name"], set(config["prepare"]["sets"])
    out = repo / "reports" / name
    split = json.loads((out / "split.json").read_text())
    assert split["env"] == env and set(split["sets"]) == sets
    if env != "code_review":  # the code problems' sets stay out of the text environments' splits
        assert not {"coop", "humaneval"} & set(split["sets"])
    header = (out / "comparison.csv").read_text().splitlines()[0].split(",")
    assert {"method", "return_mean", "return_ci_low", "return_ci_high"} <= set(header)
    assert "pass@1" not in header
    methods = {line.split(",")[0] for line in (out / "comparison.csv").read_text().splitlines()[1:]}
    trained_and_baselines = {
        *("single", "naive_concat", "sequential", "discussion", "single_grpo", "magrpo")
    }
    assert methods == trained_and_baselines | (set() if frozen_left_out else set(FROZEN_METHODS))
    paired = (out / "paired.csv").read_text().splitlines()
    assert {line.split(",")[3] for line in paired[1:]} == {"return"}
    results = (out / "results.md").read_text()
    assert "MAGRPO (ours)" in results and "First vs last quarter" in results
    train = json.loads((out / "train_metrics.json").read_text())
    assert train["steps"] == 2 and "coop_rate_last_quarter" not in train
    work = repo / "build" / "experiments" / name
    rows = [json.loads(x) for x in (work / "results/train/rollouts.jsonl").read_text().splitlines()]
    agents = parse_params(config).model.agents
    assert rows and all(set(r["code"]) == set(agents) and "text" in r for r in rows)
    assert "correct" not in rows[0] and "total" in rows[0]["reward"]
    assert json.loads((work / "results/schemes/summary.json").read_text())["per_method"] == {}
    assert (out / "figures" / "baseline_comparison.png").is_file()


# code_review runs in tests/stages/test_experiment.py, where it also checks the experiment runner
@pytest.mark.e2e
@pytest.mark.parametrize(
    "env,sets,frozen", [("story", {"story"}, True), ("writing", {"tldr"}, False)]
)
def test_a_text_environment_runs_every_stage(tiny_repo, env, sets, frozen):
    """Story runs every stage; writing (and code review, test_experiment.py) every stage but the
    frozen-team ones, which run the same code on any text environment."""
    repo, _ = tiny_repo
    # 32 new tokens: a text environment scores any text (code needs 64 to parse at all)
    config = {**text_config(env, sets), "sampling": {"max_new_tokens": 32}}
    (repo / "text.yaml").write_text(yaml.safe_dump(config))
    only = [] if frozen else without_frozen_teams()
    run_in(repo, "python", "-m", "orchestry.experiment", "text.yaml", *only, timeout=1500)
    check_text_report(repo, "text", config, frozen_left_out=not frozen)
