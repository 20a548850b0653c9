"""Each stage's code fingerprint holds what its params select and nothing else (issue 55): bounds on
the closures, an edit moves only the stages it touches, a stage fails when it runs code its
fingerprint misses."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import PIPELINE, copy_run, run_in, tiny_params

from orchestry.bookkeeping import code_deps, fingerprint
from orchestry.params import parse_params

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = parse_params(yaml.safe_load((ROOT / "params.yaml").read_text()))
TRAINING = ("algos/magrpo.py", "algos/pg_update.py", "algos/tree.py")


def closure(stage: str, **overrides: object) -> list[str]:
    params = DEFAULT.model_copy(update=overrides) if overrides else DEFAULT
    return code_deps.stage_code(stage, fingerprint.plugins(params))


def test_the_closures_at_the_default_params_hold_only_what_they_run():
    sizes = {stage: len(closure(stage)) for stage in code_deps.STAGES}
    print("\nfiles per stage at the default params:", sizes)
    assert sizes["figures"] <= 30 and sizes["schemes"] <= 30, sizes
    for stage in ("baseline", "evaluate", "evaluate_single"):
        files = closure(stage)
        assert not [f for f in files if f.endswith(TRAINING)], stage
        assert not [f for f in files if "/cuda/" in f], stage
    for stage in code_deps.STAGES:  # model.device: cpu
        files = closure(stage)
        assert not [f for f in files if "/triton_" in f or "/graph_" in f or "/cuda/" in f], stage
        assert not [f for f in files if f.startswith("orchestry/envs/story/")], stage  # env code
        assert "orchestry/agents/claude/client.py" not in files, stage  # no setting calls Claude


def test_the_params_choose_the_plug_ins():
    """The CUDA engine with model.device cuda, Claude with evaluate.backend claude, the story env
    with env.name story, the pipeline module with train.parallel pipeline: each only then."""
    cuda = DEFAULT.model_copy(update={"model": DEFAULT.model.model_copy(update={"device": "cuda"})})
    assert "orchestry/agents/lora/cuda/graph_decode.py" in code_deps.stage_code(
        "evaluate", fingerprint.plugins(cuda)
    )
    claude = DEFAULT.model_copy(
        update={"evaluate": DEFAULT.evaluate.model_copy(update={"backend": "claude"})}
    )
    assert "orchestry/agents/claude/client.py" in code_deps.stage_code(
        "baseline", fingerprint.plugins(claude)
    )
    story = parse_params(
        {"env": {"name": "story"}, "prepare": {"sets": {"story": {"n_train": 1, "n_test": 1}}}}
    )
    files = code_deps.stage_code("train", fingerprint.plugins(story))
    assert "orchestry/envs/story/judge.py" in files and "orchestry/envs/code/kind.py" not in files
    pipeline = DEFAULT.model_copy(
        update={"train": DEFAULT.train.model_copy(update={"parallel": "pipeline"})}
    )
    assert "orchestry/stages/train_pipeline.py" in code_deps.stage_code(
        "train", fingerprint.plugins(pipeline)
    )
    assert "orchestry/stages/train_pipeline.py" not in closure("train")
    # a plug-in joins only the stages whose code holds its registry
    assert "orchestry/agents/lora/cuda/graph_decode.py" not in code_deps.stage_code(
        "figures", fingerprint.plugins(cuda)
    )


def test_a_docstring_or_comment_is_no_code_change(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""One."""\n\n\ndef f(x):\n    """Doc."""\n    return x + 1  # why\n')
    before = code_deps.code_digest(source)
    source.write_text('"""Two."""\n\n\ndef f(x):\n    """Other doc."""\n\n    return x + 1\n')
    assert code_deps.code_digest(source) == before
    source.write_text("def f(x):\n    return x + 1\n")  # no docstrings at all
    assert code_deps.code_digest(source) == before
    source.write_text('X = 1\n"""What X is."""\n')
    attribute = code_deps.code_digest(source)
    source.write_text('X = 1\n"""What X is, said otherwise."""\n')
    assert code_deps.code_digest(source) == attribute
    source.write_text('"""Two."""\n\n\ndef f(x):\n    """Other doc."""\n    return x + 2\n')
    assert code_deps.code_digest(source) != before


NESTED = '''"""Module."""
import a


class C:
    """Class."""

    def f(self):
        """Method."""
        import b
        with open("x") as f:
            "with"
            from c import d
        for _ in range(2):
            "loop"
            import e
        else:
            import f


try:
    import g
except ImportError:
    "handler"
    import h
else:
    "else"
    import i
finally:
    "finally"
    import j
match a:
    case 1:
        "case"
        import k
    case _:
        pass
while False:
    if True:
        import m
    else:
        import n
'''


def test_imports_and_docstrings_are_found_in_every_nested_block(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(NESTED)
    imports = set(code_deps._source(source).imports)
    assert imports == {*"abeghijkmn", "c", "c.d", "f"}
    # every string statement, however deep, is prose: the digest is the code's without them
    bare = tmp_path / "bare.py"
    bare.write_text(
        "\n".join(line for line in NESTED.splitlines() if not line.lstrip().startswith('"'))
    )
    assert code_deps.code_digest(bare) == code_deps.code_digest(source)


def test_an_edited_file_is_read_anew_however_quickly(tmp_path):
    # read once per content, not per path and time: an edit of the same size within the file
    # system's clock tick is still seen
    source = tmp_path / "m.py"
    source.write_text("import a\nX = 1\n")
    before = code_deps.code_digest(source), code_deps._source(source).imports
    source.write_text("import b\nX = 2\n")
    assert code_deps.code_digest(source) != before[0]
    assert code_deps._source(source).imports == ("b",)


def run_stage(repo: Path, stage: str, patch: str = "pass") -> subprocess.CompletedProcess:
    """`python -m orchestry STAGE` in `repo`, after `patch` (python run first in that process)."""
    code = f"import sys\n{patch}\nfrom orchestry.cli import main\nsys.exit(main([{stage!r}]))"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=600
    )


def test_a_stage_fails_when_a_registry_forgets_a_plug_in(tmp_path):
    """The writing env's prepare, once as it is, once with `plugins` forgetting the env: the
    stage loads envs/writing/kind.py by name, its fingerprint lacks it, and it fails naming it."""
    sets = {"tldr": {"n_train": 2, "n_test": 1}}
    raw = tiny_params(env={"name": "writing"}, prepare={"sets": sets})
    raw["model"]["agents"] = ["first", "second"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "data").mkdir()  # the input alone: prepare writes data/prepared/ here
    (tmp_path / "data/writing").symlink_to(ROOT / "data/writing")
    ok = run_stage(tmp_path, "prepare")
    assert ok.returncode == 0, ok.stderr[-2000:]
    written = (tmp_path / "results/fingerprints/prepare.txt").read_text()
    assert "orchestry/envs/writing/kind.py" in written
    forgot = "from orchestry.bookkeeping import fingerprint as f; f.plugins = lambda p: []"
    failed = run_stage(tmp_path, "prepare", forgot)
    assert failed.returncode == 1
    assert "orchestry/envs/writing/kind.py" in failed.stderr
    assert "fingerprint.py `plugins`" in failed.stderr


def changed_stages(repo: Path) -> set[str]:
    """The stages `dvc status` finds a changed dependency in, after the fingerprints are rewritten
    (`python -m orchestry deps`: what `dvc repro`'s first stage does); one `dvc status` for both
    pipelines (the opt-in one's stages come back as `optional/dvc.yaml:orchestrate`)."""
    run_in(repo, sys.executable, "-m", "orchestry", "deps")
    out = run_in(repo, "dvc", "status", "--json", "dvc.yaml", "optional/dvc.yaml").stdout
    status = json.loads(out or "{}")
    changed = set()
    for name, entries in status.items():
        stage = name.split(":")[-1]
        if stage != "fingerprints" and any(
            "changed deps" in e for e in entries if isinstance(e, dict)
        ):
            changed.add(stage)
    return changed


def edit(repo: Path, rel: str) -> None:
    """A code change (not a comment) at the end of a module."""
    path = repo / rel
    path.write_text(path.read_text() + "\n_EDITED = 1\n")


@pytest.mark.e2e
@PIPELINE
def test_an_edit_moves_only_the_stages_whose_code_it_changes(tiny_pipeline, tmp_path):
    repo = copy_run(tiny_pipeline, tmp_path / "repo")
    # two edits outside every closure at these params (the CUDA engine, the story env), checked in
    # one pass: a stage moved by either, or by none (a copy that is not up to date), fails it
    edit(repo, "orchestry/agents/lora/cuda/triton_layer.py")
    edit(repo, "orchestry/envs/story/judge.py")
    assert changed_stages(repo) == set()
    edit(repo, "orchestry/algos/magrpo.py")
    moved = changed_stages(repo)
    assert "train" in moved and "train_single" in moved
    assert not moved & {"baseline@single", "baseline", "evaluate", "figures", "schemes"}, moved


@pytest.mark.e2e
@PIPELINE
def test_after_dvc_one_touch_leaves_snakemake_nothing_to_do(tiny_pipeline, tmp_path):
    """The README's command for a fresh clone after `make repro`: file times there say nothing, so
    `snakemake --touch` once, and Snakemake plans no job over DVC's outputs."""
    repo = copy_run(tiny_pipeline, tmp_path / "repo")
    run_in(repo, "snakemake", "--cores", "1", "--touch")
    planned = run_in(repo, "snakemake", "--cores", "1", "-n")
    assert "Nothing to be done" in planned.stdout + planned.stderr, planned.stdout[-3000:]
    readme = (ROOT / "README.md").read_text()
    assert "snakemake --cores 2 --touch" in readme
