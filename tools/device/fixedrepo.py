"""Git repositories whose hashes are the same wherever they are built: the device cases' repos.

Used by tools/device/bisect_repo.py and suspects_repo.py (standard library and git only: they run
on the GPU host too). Every commit has a fixed author, committer and date, so a test can rebuild the
repository the captures ran at and check its hashes against the recorded ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

Edits = dict[str, tuple[str, str]]
"""path (or `path#tag`, to edit one file twice in a commit) -> (old text, new text)."""


def git(dest: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", "-C", str(dest), *args], check=True, capture_output=True, text=True, env=env
    )
    return out.stdout.strip()


def commit_edits(
    dest: Path, files: dict[str, str], edits: list[tuple[str, str, Edits]], hour: int, who: str
) -> list[tuple[str, str, str]]:
    """Init a repository in `dest` and commit `files` once per (role, subject, edits) entry, each
    edit applied to the text before (it must occur exactly once), commit i dated
    2026-12-01T{hour}:{i}:00Z by `who` <dev@who.invalid>; (hash, role, subject) per commit."""
    git(dest, "init", "-q", "-b", "main")
    out = []
    for i, (role, subject, change) in enumerate(edits):
        for key, (old, new) in change.items():
            path = key.split("#")[0]
            assert files[path].count(old) == 1, (path, old)
            files[path] = files[path].replace(old, new)
        for path, text in files.items():
            (dest / path).write_text(text)
        stamp = f"2026-12-01T{hour:02d}:{i:02d}:00Z"
        env = {
            **os.environ,
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_DATE": stamp,
            "GIT_AUTHOR_NAME": who,
            "GIT_AUTHOR_EMAIL": f"dev@{who}.invalid",
            "GIT_COMMITTER_NAME": who,
            "GIT_COMMITTER_EMAIL": f"dev@{who}.invalid",
        }
        git(dest, "add", "-A")
        git(dest, "-c", "commit.gpgsign=false", "commit", "-q", "-m", subject, env=env)
        out.append((git(dest, "rev-parse", "HEAD"), role, subject))
    return out


def main(argv: list[str], script: str, build: Callable[[Path], list[tuple[str, str, str]]]) -> int:
    """`script DEST`: build into a new folder DEST, print hash, role and subject per commit."""
    if len(argv) != 1:
        print(f"usage: {script} DEST", file=sys.stderr)
        return 2
    dest = Path(argv[0])
    if dest.exists():
        print(f"{script}: {dest} exists; give a new folder", file=sys.stderr)
        return 1
    for sha, role, subject in build(dest):
        print(sha, role, subject)
    return 0
