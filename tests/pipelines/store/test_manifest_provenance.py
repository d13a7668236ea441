"""A manifest's git revision read from the repository's files equals ``git rev-parse HEAD`` (in a
plain repository, with packed refs, detached, in a linked worktree, outside any repository), and
its package versions equal ``importlib.metadata.version``'s."""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from ddai.pipelines.store import manifest
from ddai.pipelines.store import manifest_provenance as mp

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git program")


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    (repo / "pkg" / "a.txt").write_text("a")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    return repo


def _same_as_git(where: Path) -> str:
    want = mp.git_rev_parse(where)
    got = mp.head_from_files(where)
    assert got == want and want is not None
    return want


def test_loose_then_packed_then_detached(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    first = _same_as_git(repo / "pkg")
    _git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert _same_as_git(repo / "pkg") == first
    (repo / "pkg" / "a.txt").write_text("b")
    _git(repo, "commit", "-q", "-am", "two")  # a loose ref again, newer than the packed one
    second = _same_as_git(repo / "pkg")
    assert second != first
    _git(repo, "checkout", "-q", "--detach", first)
    assert _same_as_git(repo) == first


def test_linked_worktree_reads_its_own_head(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "pkg" / "a.txt").write_text("b")
    _git(repo, "commit", "-q", "-am", "two")
    _git(repo, "pack-refs", "--all")
    wt = tmp_path / "wt"
    _git(repo, "worktree", "add", "-q", "-b", "side", str(wt), first)
    assert (wt / ".git").is_file()
    assert _same_as_git(wt / "pkg") == first
    assert _same_as_git(repo / "pkg") != first


def test_outside_a_repository_is_none(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert mp.head_from_files(tmp_path / "plain") is None
    assert mp.git_rev_parse(tmp_path / "plain") is None


def test_unusual_layouts_ask_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _repo(tmp_path)
    monkeypatch.setenv("GIT_DIR", str(repo / ".git"))
    assert mp.head_from_files(repo) is mp._UNUSUAL
    monkeypatch.delenv("GIT_DIR")
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/unborn")  # git fails: no commit
    assert mp.head_from_files(repo) is mp._UNUSUAL
    assert mp.git_rev_parse(repo) is None


def test_this_repository_and_the_manifest_record() -> None:
    """The value a manifest records is ``git rev-parse HEAD`` run where the package lies (this
    checkout, a worktree of the project's repository or not)."""
    assert mp.git_revision() == mp.git_rev_parse(mp._HERE)
    assert manifest.git_revision is mp.git_revision


def test_package_versions_are_metadata_versions() -> None:
    got = mp.package_versions()
    for name in mp.PACKAGES:
        try:
            assert got[name] == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert name not in got
    assert "duckdb" in got  # a dependency: at least one version is checked
    assert mp.ddai_version() == metadata.version("ddai")
