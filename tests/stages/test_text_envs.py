"""The story, writing and code-review environments through the whole pipeline, selected by
`env.name` alone."""

import json

import pytest
import yaml
from conftest import run_in

from orchestry.params import ParamsError, parse_params
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
    """A tiny experiment config of a text environment: two training tasks and one test task, two
    steps of G=2, two samples, 16 new tokens (an environment that scores text scores any text; the
    code environment needs 64 to parse at all, and code_review's runs check the wiring, not
    rewards)."""
    return {
        "env": {"name": env},
        "prepare": {"sets": {s: {"n_train": 2, "n_test": 1} for s in sets}},
        "sampling": {"max_new_tokens": 16},
        "train": {"max_steps": 2, "group_size": 2},
        "evaluate": {"n_samples": 2},
    }


def env_stages(baseline: str) -> list[str]:
    """`--only` for a text environment beside story: its data, training, evaluation and one team
    baseline. Story runs every stage (test_a_text_environment_runs_every_stage); the others (train
    the single agent, the other baselines, schemes, figures, the frozen teams) run the same code on
    any environment, which the story run and the contract test (tests/envs/test_contract.py) cover."""
    return ["--only", ",".join(["prepare", "train", "evaluate", f"baseline@{baseline}"])]


def check_split_and_rollouts(repo, name: str, config: dict) -> None:
    """A text environment's run: its own task sets, two training steps, rollouts of every agent
    scored by reward parts (no tests to pass)."""
    env, sets = config["env"]["name"], set(config["prepare"]["sets"])
    out = repo / "reports" / name
    split = json.loads((out / "split.json").read_text())
    assert split["env"] == env and set(split["sets"]) == sets
    if env != "code_review":  # the code problems' sets stay out of the text environments' splits
        assert not {"coop", "humaneval"} & set(split["sets"])
    train = json.loads((out / "train_metrics.json").read_text())
    assert train["steps"] == 2 and "coop_rate_last_quarter" not in train
    work = repo / "build" / "experiments" / name
    rows = [json.loads(x) for x in (work / "results/train/rollouts.jsonl").read_text().splitlines()]
    agents = parse_params(config).model.agents
    assert rows and all(set(r["code"]) == set(agents) and "text" in r for r in rows)
    assert "correct" not in rows[0] and "total" in rows[0]["reward"]


def check_env_run(repo, name: str, config: dict, baseline: str) -> None:
    """What the runner reports for a run with `env_stages(baseline)`: no figures stage, so
    methods.md, and paired.csv (the return alone) from the generations."""
    check_split_and_rollouts(repo, name, config)
    out = repo / "reports" / name
    assert sorted(p.stem for p in (out / "methods").glob("*.json")) == sorted(["magrpo", baseline])
    methods = (out / "methods.md").read_text()
    assert "| magrpo |" in methods and f"| {baseline} |" in methods and "n/a" in methods
    paired = (out / "paired.csv").read_text().splitlines()
    assert {line.split(",")[3] for line in paired[1:]} == {"return"}
    assert {line.split(",")[4] for line in paired[1:]} == {baseline}
    assert not (out / "results.md").exists() and not (out / "figures").exists()


def check_text_report(repo, name: str, config: dict) -> None:
    """What `python -m orchestry.bookkeeping.experiment` must have reported for a text environment's run of
    every stage."""
    check_split_and_rollouts(repo, name, config)
    out = repo / "reports" / name
    header = (out / "comparison.csv").read_text().splitlines()[0].split(",")
    assert {"method", "return_mean", "return_ci_low", "return_ci_high"} <= set(header)
    assert "pass@1" not in header
    methods = {line.split(",")[0] for line in (out / "comparison.csv").read_text().splitlines()[1:]}
    trained_and_baselines = {
        *("single", "naive_concat", "sequential", "discussion", "single_grpo", "magrpo")
    }
    assert methods == trained_and_baselines | set(FROZEN_METHODS)
    paired = (out / "paired.csv").read_text().splitlines()
    assert {line.split(",")[3] for line in paired[1:]} == {"return"}
    results = (out / "results.md").read_text()
    assert "MAGRPO (ours)" in results and "First vs last quarter" in results
    work = repo / "build" / "experiments" / name
    assert json.loads((work / "results/schemes/summary.json").read_text())["per_method"] == {}
    assert (out / "figures" / "baseline_comparison.png").is_file()


@pytest.mark.e2e
def test_story_runs_every_stage(tiny_repo):
    """Every stage on a text environment: the story one."""
    repo, _ = tiny_repo
    config = text_config("story", {"story"})
    (repo / "text.yaml").write_text(yaml.safe_dump(config))
    run_in(repo, "python", "-m", "orchestry.bookkeeping.experiment", "text.yaml", timeout=1500)
    check_text_report(repo, "text", config)


# code_review runs in tests/stages/test_experiment.py, where it also checks the experiment runner
@pytest.mark.e2e
def test_writing_trains_and_evaluates_by_its_name_alone(tiny_repo):
    repo, _ = tiny_repo
    config = text_config("writing", {"tldr"})
    (repo / "text.yaml").write_text(yaml.safe_dump(config))
    run_in(
        repo,
        "python",
        "-m",
        "orchestry.bookkeeping.experiment",
        "text.yaml",
        *env_stages("discussion"),
    )
    check_env_run(repo, "text", config, "discussion")
