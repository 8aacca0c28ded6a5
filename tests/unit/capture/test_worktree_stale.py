"""capture/worktree.py: worktrees left by a killed capture are removed, live ones kept (real git)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from capture import worktree as wt
from tests.support.gitrepo import git as _git

pytestmark = [pytest.mark.git]


def _left_behind(repo: Path, sha: str, owners: list[int]) -> Path:
    """A worktree as `wt.worktree` makes it, as if its capture had been killed mid-run."""
    parent = Path(tempfile.mkdtemp(prefix=wt.WT_PREFIX))
    (parent / wt.OWNER).write_text(" ".join(map(str, owners)))
    _git(repo, "worktree", "add", "--detach", "--quiet", str(parent / sha[:12]), sha)
    return parent / sha[:12]


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_dead_owners_worktree_removed_live_ones_and_others_kept(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "f.txt").write_text("x")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-qm", "one")
    sha = _git(repo, "rev-parse", "HEAD")
    dead = _left_behind(repo, sha, [_dead_pid(), _dead_pid()])
    live = _left_behind(repo, sha, [_dead_pid(), os.getpid()])  # nsys gone, tracediff running
    mine = tmp_path / "users-own-worktree"  # not made by tracediff: never touched
    _git(repo, "worktree", "add", "--detach", "--quiet", str(mine), sha)
    try:
        assert wt.remove_stale(repo) == [dead]
        listed = _git(repo, "worktree", "list")
        assert not dead.parent.exists() and str(dead) not in listed
        assert live.is_dir() and str(live) in listed and str(mine) in listed
        assert _git(repo, "status", "--porcelain") == ""
    finally:
        _git(repo, "worktree", "remove", "--force", str(live))
        live.parent.joinpath(wt.OWNER).unlink()
        live.parent.rmdir()
