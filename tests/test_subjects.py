"""ci/subjects.sh, .ci/run's check that every commit after the one adding
the check has a subject of at most 72 characters, on a toy repository: it
passes on short subjects, fails on a long one, leaves alone a long subject
merged in from beside it, and says so in a shallow clone that lacks the
adding commit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.repo import REPO

pytestmark = pytest.mark.once


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout


def commit(repo: Path, subject: str, name: str = "f") -> None:
    (repo / name).write_text(subject)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)


def check(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(repo / "ci" / "subjects.sh")], capture_output=True,
                          text=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    r = tmp_path / "r"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    commit(r, "an old commit whose subject runs on well past the seventy-two characters")
    (r / "ci").mkdir()
    shutil.copy(REPO / "ci" / "subjects.sh", r / "ci" / "subjects.sh")
    commit(r, "ci: the subject check")
    return r


def test_short_subjects_pass(repo):
    commit(repo, "x" * 72)
    out = check(repo)
    assert out.returncode == 0 and "1 commits checked" in out.stdout, out.stdout


def test_a_long_subject_fails(repo):
    commit(repo, "y" * 73)
    out = check(repo)
    assert out.returncode == 1 and "73 " in out.stdout, out.stdout


def test_a_branch_made_beside_it_is_not_judged(repo):
    git(repo, "checkout", "-q", "-b", "side", "HEAD~1")
    commit(repo, "z" * 90, name="g")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    out = check(repo)
    assert out.returncode == 0, out.stdout


def test_a_shallow_clone_says_what_it_checks(repo, tmp_path):
    commit(repo, "a short one")
    commit(repo, "another")
    clone = tmp_path / "c"
    subprocess.run(["git", "clone", "-q", "--depth", "2", f"file://{repo}", str(clone)],
                   check=True)
    out = check(clone)
    assert out.returncode == 0 and "not in this shallow clone" in out.stdout, out.stdout
    assert "checking the 2 commits" in out.stdout, out.stdout
