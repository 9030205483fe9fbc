"""`.ci/ab-repo DIR [CHANGE]`: the scratch repository `.ci/gpu` runs an A/B in (the working tree as it
is, one commit, a real change a second), made alike from a checkout with history and from a copy
without, and leaving the checkout as it was."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHANGE = "cpu-adam-one-thread-fewer"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_tree(root: Path, history: bool) -> Path:
    """A small tree with the script, the changes and the file they patch; with history, a commit of
    it and then uncommitted edits (a changed file, a new one), an ignored file and a .venv."""
    tree = root / "tree"
    (tree / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "ab-repo", tree / ".ci" / "ab-repo")
    shutil.copytree(ROOT / ".ci" / "changes", tree / ".ci" / "changes")
    (tree / "csrc").mkdir()
    shutil.copy(ROOT / "csrc" / "cpu_adam.cpp", tree / "csrc" / "cpu_adam.cpp")
    (tree / ".gitignore").write_text("/.venv/\n/results/\n")
    (tree / "README.md").write_text("committed\n")
    if history:
        git(tree, "init", "-q")
        git(tree, "add", "-A")
        git(tree, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    (tree / "README.md").write_text("edited, not committed\n")
    (tree / "new.txt").write_text("untracked\n")
    (tree / "results").mkdir()
    (tree / "results" / "big.json").write_text("ignored\n")
    (tree / ".venv" / "bin").mkdir(parents=True)
    return tree


def checkout_state(tree: Path) -> dict[str, str]:
    return {"head": git(tree, "rev-parse", "HEAD"), "status": git(tree, "status", "--porcelain", "--ignored"),
            "refs": git(tree, "for-each-ref"), "objects": git(tree, "count-objects", "-v"),
            "worktrees": git(tree, "worktree", "list", "--porcelain"), "log": git(tree, "log", "--oneline", "--all")}


def run_ab_repo(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", ".ci/ab-repo", *args], cwd=tree, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull})


def files_of(repo: Path, rev: str) -> set[str]:
    return set(git(repo, "ls-tree", "-r", "--name-only", rev).splitlines())


@pytest.mark.parametrize("history", [True, False], ids=["with-history", "without-history"])
def test_the_working_tree_as_it_is_then_the_change(tmp_path, history):
    tree = make_tree(tmp_path, history)
    before = checkout_state(tree) if history else None
    scratch = tmp_path / "scratch"
    proc = run_ab_repo(tree, str(scratch), CHANGE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "HEAD~1"
    assert git(scratch, "rev-list", "--count", "HEAD") == "2"
    # the base: the tree's files as git add -A takes them, uncommitted edits and new files in, ignored out
    assert files_of(scratch, "HEAD~1") == {".ci/ab-repo", ".gitignore", "README.md", "new.txt", "csrc/cpu_adam.cpp",
                                            *(f".ci/changes/{p.name}" for p in (ROOT / ".ci" / "changes").glob("*.patch"))}
    assert git(scratch, "show", "HEAD~1:README.md") == "edited, not committed"
    # the head: the change alone, as its patch says
    assert git(scratch, "diff", "--name-only", "HEAD~1", "HEAD") == "csrc/cpu_adam.cpp"
    assert "threads -= 1" in git(scratch, "diff", "HEAD~1", "HEAD")
    assert git(scratch, "status", "--porcelain") == ""  # .venv linked, ignored there as here
    assert (scratch / ".venv").is_symlink() and (scratch / ".venv").resolve() == (tree / ".venv").resolve()
    if history:
        assert checkout_state(tree) == before
    else:
        assert not (tree / ".git").exists()
    assert (tree / "csrc" / "cpu_adam.cpp").read_text() == (ROOT / "csrc" / "cpu_adam.cpp").read_text()


def test_an_a_a_is_one_commit_and_runs_in_a_row_need_nothing_put_back(tmp_path):
    tree = make_tree(tmp_path, history=True)
    before = checkout_state(tree)
    for n, change in enumerate(["", CHANGE, CHANGE]):
        scratch = tmp_path / f"scratch{n}"
        proc = run_ab_repo(tree, str(scratch), *([change] if change else []))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == ("HEAD~1" if change else "HEAD")
        assert git(scratch, "rev-list", "--count", "HEAD") == ("2" if change else "1")
    assert checkout_state(tree) == before


def test_refusals_name_the_bad_value_and_what_is_allowed(tmp_path):
    tree = make_tree(tmp_path, history=True)
    proc = run_ab_repo(tree, str(tmp_path / "s"), "nope")
    assert proc.returncode == 2
    allowed = " ".join(sorted(p.stem for p in (ROOT / ".ci" / "changes").glob("*.patch")))
    assert proc.stderr.strip() == f"ab-repo: change nope: allowed one of: {allowed}"
    assert not (tmp_path / "s").exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    proc = run_ab_repo(tree, str(full))
    assert proc.returncode == 2 and "allowed an absent or empty folder" in proc.stderr
    assert sorted(p.name for p in full.iterdir()) == ["x"]
