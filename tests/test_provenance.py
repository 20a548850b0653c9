"""The manifest a result carries: commit, dirty flag and code hash follow the code that made it."""

import subprocess

from orchestry.provenance import code_hash, git_state, manifest


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_the_manifest_names_the_commit_and_sees_a_code_change(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg/a.py").write_text("x = 1\n")
    (repo / "notes.md").write_text("prose\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    files = ["pkg/a.py"]
    before = manifest(repo, files, {"seed": 0}, {"cpu_cores": 2}, started=0.0, wall_s=1.04)
    assert before["commit"] == head and before["dirty"] is False
    assert before["started"] == "1970-01-01T00:00:00Z" and before["wall_s"] == 1.0
    assert before["params"] == {"seed": 0} and before["code_files"] == 1

    (repo / "notes.md").write_text("other prose\n")  # not the producing code: still clean
    assert git_state(repo, files) == (head, False)
    (repo / "pkg/a.py").write_text("x = 2\n")
    assert git_state(repo, files) == (head, True)
    assert code_hash(repo, files) != before["code_sha256"]

    monkeypatch.setenv("ORCHESTRY_COMMIT", "abc")  # the launcher's word beats a copy's stale git
    assert git_state(repo, files) == ("abc", None)
    subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)
    monkeypatch.delenv("ORCHESTRY_COMMIT")
    assert git_state(repo, files) == ("unknown", None)
