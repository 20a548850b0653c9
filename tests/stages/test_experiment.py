"""`python -m orchestry.bookkeeping.experiment`: the whole pipeline on overridden params, reported apart, resumable."""

import json
import sys

import pytest
import yaml
from conftest import ROOT, run_in
from test_text_envs import check_env_run, env_stages, text_config

from orchestry.bookkeeping.experiment import merged, resolve
from orchestry.bookkeeping.stage_runs import (
    pipeline_commands,
    run_stages,
    stage_commands,
    stage_needs,
    with_params,
)


def test_merged_overrides_nested_keys_and_keeps_the_rest():
    base = {"train": {"lr": 1.0, "turns": 1}, "seed": 0}
    assert merged(base, {"train": {"turns": 2}}) == {"train": {"lr": 1.0, "turns": 2}, "seed": 0}
    assert base == {"train": {"lr": 1.0, "turns": 1}, "seed": 0}


def test_stages_come_in_dvc_yaml_order_with_its_commands():
    names = [name for name, _ in stage_commands(ROOT / "dvc.yaml")]
    assert names[:2] == ["fingerprints", "prepare"] and names[-1] == "figures"
    assert names.index("train") < names.index("evaluate") < names.index("schemes")
    assert {"baseline@single", "baseline@discussion"} <= set(names)
    # the opt-in stages of optional/dvc.yaml come after the pipeline
    assert [n for n, _ in pipeline_commands()] == [*names, "orchestrate"]
    argv = with_params("python -m orchestry --log logs/train.log train", "p.yaml")
    assert argv[1:] == ["-m", "orchestry", "--params", "p.yaml", "--log", "logs/train.log", "train"]


@pytest.mark.parametrize(
    "config", sorted((ROOT / "workflow" / "experiments").glob("*.yaml")), ids=lambda p: p.stem
)
def test_every_committed_config_is_valid_over_params_yaml(config):
    """Each documented config (alone, over params.yaml) names only keys the params know."""
    resolve([config], ROOT / "params.yaml")


@pytest.mark.parametrize(
    "control, changed",
    [
        ("control_single_steps", {"sft.batch_rows": 16}),
        ("control_shared_adapter", {"model.shared_adapter": True}),
        ("control_single_contract", {"env.single_prompt": "helper_contract"}),
        ("control_single_512", {"sampling.max_new_tokens": 512, "prepare.budget_tokens": 256}),
    ],
)
def test_each_control_of_the_warm_start_changes_only_its_lever(control, changed):
    """Issue 57's four registered controls, each over gpu.yaml + gpu_sft.yaml: the keys it names
    differ from the comparison's params and nothing else does."""
    experiments = ROOT / "workflow" / "experiments"
    base = [experiments / "gpu.yaml", experiments / "gpu_sft.yaml"]

    def flat(tree: dict, prefix: str = "") -> dict:
        out = {}
        for key, value in tree.items():
            if isinstance(value, dict) and value:
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    plain = flat(resolve(base, ROOT / "params.yaml").model_dump(mode="json"))
    lever = flat(
        resolve([*base, experiments / f"{control}.yaml"], ROOT / "params.yaml").model_dump(
            mode="json"
        )
    )
    assert {k: v for k, v in lever.items() if plain.get(k) != v} == changed


def test_the_humaneval_lever_adds_training_problems_and_no_test_problem():
    experiments = ROOT / "workflow" / "experiments"
    plain = resolve([experiments / "gpu.yaml"], ROOT / "params.yaml")
    lever = resolve(
        [experiments / "gpu.yaml", experiments / "humaneval_train.yaml"], ROOT / "params.yaml"
    )
    for name, split in plain.prepare.sets.items():
        if name != "humaneval_paper":
            assert lever.prepare.sets[name] == split, name
    assert lever.prepare.sets["humaneval_paper"].n_train == 130
    assert (
        lever.prepare.sets["humaneval_paper"].n_test == plain.prepare.sets["humaneval_paper"].n_test
    )


@pytest.mark.e2e
def test_experiment_runs_apart_reports_and_goes_on_where_it_stopped(tiny_repo):
    """The runner on the code-review environment (its check of the environment too, beside the
    other text environments in test_text_envs.py; the story run there reports every stage)."""
    repo, _ = tiny_repo
    config = text_config("code_review", {"coop"})
    (repo / "exp.yaml").write_text(yaml.safe_dump(config))
    only = env_stages("sequential")
    run = run_in(
        repo, "python", "-m", "orchestry.bookkeeping.experiment", "exp.yaml", *only, timeout=1500
    )
    check_env_run(repo, "exp", config, "sequential")
    out = repo / "reports" / "exp"
    assert yaml.safe_load((out / "params.yaml").read_text())["train"]["max_steps"] == 2
    header, *problems = (out / "per_problem.csv").read_text().splitlines()
    assert header.startswith("method,heldout_set,problem_id")
    assert len(problems) == 2 * 1  # two methods x one test problem
    wall = json.loads((out / "wall_time.json").read_text())
    assert wall["total_s"] > 0 and "train" in wall["stages_s"]
    assert json.loads((out / "hardware.json").read_text())["cpu_cores"] >= 1
    assert json.loads((out / "timings" / "magrpo.json").read_text())["tokens_per_s"] > 0
    record = json.loads((out / "manifest.json").read_text())
    assert len(record["commit"]) == 40 and record["dirty"] is False and record["wall_s"] > 0
    assert record["params"]["env"]["name"] == "code_review" and len(record["code_sha256"]) == 64
    assert record["command"] == " ".join(
        ["python -m orchestry.bookkeeping.experiment exp.yaml", *only]
    )
    # the committed pipeline's outputs are left alone: everything ran in build/experiments/exp
    assert not (repo / "results" / "train").exists()
    assert (repo / "build" / "experiments" / "exp" / "results" / "train" / "adapters").is_dir()

    # a second run finds every stage done (a stage whose stamp is gone runs alone again:
    # test_a_stage_whose_code_changed_runs_again_and_so_do_the_later_ones)
    rerun = ["python", "-m", "orchestry.bookkeeping.experiment", "exp.yaml", *only, "--replace"]
    again = run_in(repo, *rerun).stderr
    assert "train: done before, skipped" in again
    assert "baseline@sequential: done before, skipped" in again and "evaluate: done before" in again
    assert run.returncode == 0

    # the trained team on problems from outside the repository: no smoke, no train (and, to keep
    # the test short, only the team's evaluation: `--only` reports it in methods.md)
    outside = repo.parent / "outside"
    outside.mkdir()
    name = "area_gap"
    (outside / f"{name}.yaml").write_text((ROOT / "data" / "coop" / f"{name}.yaml").read_text())
    (repo / "unseen.yaml").write_text("prepare: {sets: {coop: {n_train: 0, n_test: 1}}}\n")
    argv = ["exp.yaml", "unseen.yaml", "--name", "unseen", "--problems", str(outside)]
    argv += ["--trained", "build/experiments/exp", "--only", "prepare,evaluate"]
    unseen = run_in(repo, "python", "-m", "orchestry.bookkeeping.experiment", *argv)
    assert "train: skipped (--trained)" in unseen.stderr
    # the trained folder holds no single agent (its run left train_single out): not skipped as trained
    assert "train_single: not run (--only)" in unseen.stderr
    split = json.loads((repo / "reports" / "unseen" / "split.json").read_text())
    assert split["sets"]["coop"] == {"available": 1, "train": 0, "test": 1}
    assert "magrpo" in (repo / "reports" / "unseen" / "methods.md").read_text()
    evaluated = repo / "build/experiments/unseen/results/evaluate/generations.jsonl"
    ids = {json.loads(x)["problem_id"] for x in evaluated.read_text().splitlines()}
    assert {i.rsplit("/", 1)[-1] for i in ids} == {"area_gap"}


def test_a_bad_key_exits_2_naming_it_and_runs_nothing(tiny_repo):
    repo, _ = tiny_repo
    (repo / "bad.yaml").write_text("train: {max_stepz: 1}\n")
    proc = run_in(repo, "python", "-m", "orchestry.bookkeeping.experiment", "bad.yaml", check=False)
    assert proc.returncode == 2 and "max_stepz" in proc.stderr
    assert not (repo / "build").exists() and not (repo / "reports" / "bad").exists()


@pytest.mark.slow  # starts processes: the slow tier (make test), not the edit loop
def test_a_failing_stage_exits_1_naming_it_and_reports_nothing(tiny_repo):
    repo, _ = tiny_repo
    (repo / "broken.yaml").write_text("model: {name: /nonexistent/model}\n")
    proc = run_in(
        repo, "python", "-m", "orchestry.bookkeeping.experiment", "broken.yaml", check=False
    )
    assert proc.returncode == 1 and "stage sft exited" in proc.stderr, proc.stderr[-2000:]
    assert not (repo / "reports" / "broken").exists()
    assert (repo / "build" / "experiments" / "broken" / ".experiment" / "prepare.done").exists()


def test_a_missing_problems_folder_exits_1_naming_it_and_builds_nothing(tiny_repo):
    repo, _ = tiny_repo
    (repo / "exp.yaml").write_text("train: {max_steps: 1}\n")
    missing = repo.parent / "no-such-problems"
    argv = ["exp.yaml", "--problems", str(missing)]
    proc = run_in(repo, "python", "-m", "orchestry.bookkeeping.experiment", *argv, check=False)
    assert proc.returncode == 1 and "no-such-problems: no such folder" in proc.stderr
    assert not missing.exists() and not (repo / "build").exists()


def test_only_names_stages_of_dvc_yaml(tmp_path, capsys):
    from orchestry.bookkeeping.experiment import main

    config = tmp_path / "x.yaml"
    config.write_text("seed: 0\n")
    assert main([str(config), "--name", "never", "--only", "prepare,orchestrate,beem"]) == 2
    assert "--only: no such stage beem\n" in capsys.readouterr().err  # orchestrate is one
    assert not (ROOT / "build/experiments/never").exists()


def test_an_existing_report_is_kept_unless_replace_says_so(tmp_path, capsys):
    """A second run under a name already reported stops before any stage, naming the folder and
    the flag; the earlier report is left as it was."""
    from orchestry.bookkeeping.experiment import main

    config = tmp_path / "x.yaml"
    config.write_text("seed: 0\n")
    out = tmp_path / "reports" / "earlier"
    out.mkdir(parents=True)
    (out / "manifest.json").write_text("{}")
    assert main([str(config), "--name", "never", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out} exists" in err and "--replace" in err
    assert (out / "manifest.json").read_text() == "{}"
    assert not (ROOT / "build/experiments/never").exists()


def test_a_report_without_results_md_gets_a_methods_table(tmp_path):
    from orchestry.bookkeeping.experiment import methods_table

    code = {
        "return_mean": 1.5,
        "return_ci95": [1.25, 1.75],
        "pass@1": 0.5,
        "pass@1_ci95": [0.0, 1.0],
        "test_pass_rate": 0.25,
        "test_pass_rate_ci95": [0.0, 0.5],
        "new_tokens_mean": 480.4,
    }
    text = {"return_mean": 0.8, "return_ci95": [0.7, 0.9], "new_tokens_mean": 96.0}
    (tmp_path / "beam.json").write_text(json.dumps(code))
    (tmp_path / "story.json").write_text(json.dumps(text))
    robust = {**code, "robust_test_pass_rate": 0.125, "robust_test_pass_rate_ci95": [0.0, 0.25]}
    (tmp_path / "best_of.json").write_text(json.dumps(robust))
    paths = [tmp_path / f"{m}.json" for m in ("beam", "story", "best_of")]
    table = methods_table(paths)
    assert (  # beam's file is from before the robust rate: n/a
        "| beam | 1.500 [1.250, 1.750] | 0.500 [0.000, 1.000] | 0.250 [0.000, 0.500] | n/a | 480 |"
        in table
    )
    assert "| story | 0.800 [0.700, 0.900] | n/a | n/a | n/a | 96 |" in table
    assert "| 0.250 [0.000, 0.500] | 0.125 [0.000, 0.250] | 480 |" in table


def test_stages_that_read_no_outputs_of_each_other_may_run_at_once():
    needs = stage_needs()
    assert needs["prepare"] == {"fingerprints"}  # its code fingerprint
    assert needs["train"] >= {"prepare", "smoke"} and needs["train_single"] >= {"prepare", "smoke"}
    assert "train" not in needs["train_single"] and "train" not in needs["baseline@single"]
    assert needs["evaluate"] >= {"train"} and needs["evaluate_single"] >= {"train_single"}
    assert {"evaluate", "evaluate_single", "schemes"} <= needs["figures"]


def test_a_stage_whose_code_changed_runs_again_and_so_do_those_that_read_it(tmp_path, monkeypatch):
    """After a code change that stage and the stages reading its outputs run, no other; with a
    stamp gone, that stage alone."""
    import orchestry.bookkeeping.stage_runs as runs

    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text("seed: 0\n")
    journal = tmp_path / "journal.txt"
    script = f"import sys; open({str(journal)!r}, 'a').write(sys.argv[-1] + '\\n')"
    code = {"a": "1", "b": "1", "c": "1", "d": "1"}
    monkeypatch.setattr(runs, "pipeline_commands", lambda: [(n, n) for n in code])
    monkeypatch.setattr(runs, "stage_commands", lambda path: [])
    needs = {"a": set(), "b": {"a"}, "c": {"b"}, "d": {"a"}}  # d reads a alone
    monkeypatch.setattr(runs, "stage_needs", lambda: needs)
    monkeypatch.setattr(runs, "stage_code_hash", lambda name, params: code[name])
    monkeypatch.setattr(runs, "with_params", lambda cmd, _: [sys.executable, "-c", script, cmd])
    run_stages(work, "origin", lambda message: None)
    run_stages(work, "origin", lambda message: None)  # nothing changed: nothing runs
    code["b"] = "2"
    run_stages(work, "origin", lambda message: None)
    assert journal.read_text().split() == ["a", "b", "c", "d", "b", "c"]
    # a stage's stamp chains the stamps of what it reads, not whether they ran: with one stamp gone
    # (its outputs lost), that stage runs again and no other
    (work / runs.STATE / "b.done").unlink()
    said: list[str] = []
    run_stages(work, "origin", said.append)
    assert journal.read_text().split() == ["a", "b", "c", "d", "b", "c", "b"]
    assert "a: done before, skipped" in said and "c: done before, skipped" in said


def test_a_params_change_reruns_the_stages_that_read_that_key_and_those_reading_them(
    tmp_path, monkeypatch
):
    """A stage's stamp covers the params keys its dvc.yaml entry lists, not the whole file: a
    change to `evaluate.adapters` reruns the stage reading it and leaves the one before alone (so a
    work folder copied to an experiment differing in that key keeps its prepare and sft); a change
    to a key the first reads reruns both."""
    import orchestry.bookkeeping.stage_runs as runs

    work = tmp_path / "work"
    work.mkdir()
    journal = tmp_path / "journal.txt"
    script = f"import sys; open({str(journal)!r}, 'a').write(sys.argv[-1] + '\\n')"
    monkeypatch.setattr(runs, "pipeline_commands", lambda: [("a", "a"), ("b", "b")])
    monkeypatch.setattr(runs, "stage_commands", lambda path: [])
    monkeypatch.setattr(runs, "stage_needs", lambda: {"a": set(), "b": {"a"}})
    monkeypatch.setattr(
        runs, "stage_params", lambda path: {"a": ["seed"], "b": ["evaluate.adapters"]}
    )
    monkeypatch.setattr(runs, "stage_code_hash", lambda name, params: "code")
    monkeypatch.setattr(runs, "with_params", lambda cmd, _: [sys.executable, "-c", script, cmd])

    def run(text: str) -> list[str]:
        (work / "params.yaml").write_text(text)
        before = journal.read_text().split() if journal.exists() else []
        run_stages(work, "origin", lambda message: None)
        return journal.read_text().split()[len(before) :]

    assert run("seed: 0\n") == ["a", "b"]
    assert run("seed: 0\nevaluate: {adapters: warm_start}\n") == ["b"]
    assert run("seed: 0\nevaluate: {adapters: warm_start}\n") == []
    assert run("seed: 1\nevaluate: {adapters: warm_start}\n") == ["a", "b"]


def test_every_stage_lists_the_params_it_reads():
    """The stamps read dvc.yaml's params lists: every stage of both pipelines has one (the
    fingerprints stage: the keys that select plug-ins), and the sft stage's does not hold
    `evaluate` (the warm-start-only evaluation shares its sft with the run after RL)."""
    from orchestry.bookkeeping.stage_runs import OPTIONAL, stage_params

    listed = {**stage_params(ROOT / "dvc.yaml"), **stage_params(ROOT / OPTIONAL)}
    names = [name for name, _ in pipeline_commands()]
    assert set(names) <= set(listed)
    assert all(listed[name] for name in names), listed
    assert "seed" in listed["sft"] and not any(k.startswith("evaluate") for k in listed["sft"])


@pytest.mark.slow  # starts processes: the slow tier (make test), not the edit loop
def test_an_edit_to_a_stage_s_real_code_reruns_it_and_one_outside_every_closure_does_not(
    tmp_path, monkeypatch
):
    """The stamps hash each stage's real fingerprint: in a copy of the package, editing
    stages/smoke.py's code reruns smoke and the stage reading it, not prepare; a comment there, or
    an edit of commands.py (no stage's code), reruns nothing. The stage commands are cheap
    stand-ins; the code hashes are real."""
    import shutil

    import orchestry.bookkeeping.code_deps as code_deps
    import orchestry.bookkeeping.stage_runs as runs

    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "orchestry", copy / "orchestry", ignore=shutil.ignore_patterns("*.pyc"))
    for pipeline in ("dvc.yaml", "optional/dvc.yaml"):  # the params each stage reads
        (copy / pipeline).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / pipeline, copy / pipeline)
    monkeypatch.setattr(code_deps, "ROOT", copy)
    monkeypatch.setattr(runs, "ROOT", copy)
    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text("seed: 0\n")
    journal = tmp_path / "journal.txt"
    script = f"import sys; open({str(journal)!r}, 'a').write(sys.argv[-1] + '\\n')"
    order = ["prepare", "smoke", "figures"]
    monkeypatch.setattr(runs, "pipeline_commands", lambda: [(n, n) for n in order])
    monkeypatch.setattr(runs, "stage_commands", lambda path: [])
    needs = {"prepare": set(), "smoke": {"prepare"}, "figures": {"smoke"}}
    monkeypatch.setattr(runs, "stage_needs", lambda: needs)
    monkeypatch.setattr(runs, "with_params", lambda cmd, _: [sys.executable, "-c", script, cmd])

    def run() -> list[str]:
        before = journal.read_text().split() if journal.exists() else []
        run_stages(work, "origin", lambda message: None)
        return journal.read_text().split()[len(before) :]

    assert run() == order
    assert run() == []  # nothing changed
    commands = copy / "orchestry" / "bookkeeping" / "commands.py"
    commands.write_text(commands.read_text() + "\nOUTSIDE = 1  # outside every stage's closure\n")
    assert run() == []
    smoke = copy / "orchestry" / "stages" / "smoke.py"
    smoke.write_text(smoke.read_text() + "\n# a comment is no code\n")
    assert run() == []
    smoke.write_text(smoke.read_text() + "\nEDITED = 1\n")
    assert run() == ["smoke", "figures"]


def test_parallel_stages_start_only_after_what_they_read(tmp_path, monkeypatch):
    """Two jobs at once: a stage never starts before the stages whose outputs it reads end, and
    a failing stage stops new ones from starting (the ones running finish)."""
    import orchestry.bookkeeping.stage_runs as runs

    work = tmp_path / "work"
    work.mkdir()
    (work / "params.yaml").write_text("seed: 0\n")
    journal = tmp_path / "journal.txt"
    order = ["a", "b", "c", "d"]
    script = (
        "import sys, time; name = sys.argv[-1]; "
        f"open({str(journal)!r}, 'a').write(f'start {{name}} {{time.time()}}\\n'); "
        "time.sleep(0.5 if name == 'a' else 0.1); "
        f"open({str(journal)!r}, 'a').write(f'end {{name}} {{time.time()}}\\n'); "
        "sys.exit(3 if name == 'c' else 0)"
    )
    monkeypatch.setattr(runs, "pipeline_commands", lambda: [(n, n) for n in order])
    monkeypatch.setattr(runs, "stage_commands", lambda path: [])
    monkeypatch.setattr(
        runs, "stage_needs", lambda: {"a": set(), "b": set(), "c": {"a"}, "d": {"c"}}
    )
    monkeypatch.setattr(runs, "with_params", lambda cmd, _: [sys.executable, "-c", script, cmd])
    monkeypatch.setattr(runs, "stage_code_hash", lambda name, params: "code")
    with pytest.raises(runs.ExperimentFailed, match="stage c exited 3"):
        run_stages(work, "origin", lambda message: None, jobs=2)
    events = [line.split() for line in journal.read_text().splitlines()]
    at = {(kind, name): float(t) for kind, name, t in events}
    assert at[("start", "b")] < at[("end", "a")]  # b ran beside a
    assert at[("start", "c")] >= at[("end", "a")]  # c waited for a
    assert ("start", "d") not in at  # c failed: d never started
    assert sorted(p.name for p in (work / ".experiment").glob("*.done")) == ["a.done", "b.done"]


def test_a_trained_folder_brings_its_team_and_where_it_has_one_its_single_agent(tmp_path):
    """`--trained`: the finished run's train outputs are copied into the work folder, and
    train_single's too where that run trained the single agent; the stamps name both."""
    from orchestry import paths
    from orchestry.bookkeeping.experiment import prepare_workdir, trained_single
    from orchestry.params import parse_params

    trained = tmp_path / "done"
    (trained / paths.ADAPTERS / "aux").mkdir(parents=True)
    (trained / paths.TRAIN / "metrics.json").write_text("{}")
    params = parse_params({})
    team_only = prepare_workdir(tmp_path / "w1", params, [], trained=trained)
    assert not trained_single(trained) and "trained single" not in team_only
    assert (tmp_path / "w1" / paths.TRAIN / "metrics.json").is_file()
    assert not (tmp_path / "w1" / paths.TRAIN_SINGLE).exists()
    (trained / paths.SINGLE_ADAPTERS / "single").mkdir(parents=True)
    both = prepare_workdir(tmp_path / "w2", params, [], trained=trained)
    assert trained_single(trained) and "trained single: " in both
    assert (tmp_path / "w2" / paths.SINGLE_ADAPTERS / "single").is_dir()
