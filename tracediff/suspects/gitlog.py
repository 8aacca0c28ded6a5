"""The commits of a range and the lines each one changed, read from git in a few calls.

Stage: commit suspects (issue 19), input side. Input: a repository and a range BASE..HEAD; output:
`Commit`s (first-parent, oldest first) with each file's hunks as line ranges on both sides, and
the blob ids of each changed file before and after (renames found by git: a file renamed in the
range keeps its history, `diff_of` follows it); `blobs` reads many file versions in one
`git cat-file --batch`. The whole range's diff is one `git log -p --unified=0 --raw` call (never
one per commit): hunk headers and raw lines are read, the changed text itself is skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tracediff.base.errors import ToolError, UsageError

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SEP = b"\x1e"  # starts each commit's header line in the log output
_NULL_SHA = "0" * 40
TEXT_MAX = 40


@dataclass
class FileDiff:
    """One file of one commit: hunks as (old_start, old_count, new_start, new_count), 1-based,
    counts 0 for a pure insertion (old side) or deletion (new side); blob ids (None: no file)."""

    path: str
    old_blob: str | None = None
    new_blob: str | None = None
    old_path: str | None = None
    """the path before this commit when it renamed the file (git's rename detection), else None"""
    hunks: list[tuple[int, int, int, int]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    """the diff's first TEXT_MAX lines (hunk headers, removed and added lines), for the TUI"""


@dataclass
class Commit:
    sha: str
    subject: str
    author: str
    date: str
    files: dict[str, FileDiff] = field(default_factory=dict)


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    git = shutil.which("git")
    if git is None:
        raise ToolError("git is not installed", "install git (apt-get install git)")
    return subprocess.run(
        [git, "-C", str(repo), "-c", "core.quotePath=false", *args],
        capture_output=True,
        check=False,
        input=stdin,
    )


def toplevel(repo: Path) -> Path:
    """The root of the checkout holding `repo`; UsageError when it is none."""
    if not repo.is_dir():
        raise UsageError(f"--repo {repo}: no such folder", "give the git checkout of the workload")
    p = _git(repo, "rev-parse", "--show-toplevel")
    if p.returncode != 0:
        raise UsageError(
            f"--repo {repo}: not a git repository", "give the git checkout of the workload's code"
        )
    return Path(p.stdout.decode().strip())


def resolve(repo: Path, ref: str, what: str) -> str:
    """Full sha of `ref`; UsageError naming it (and where it came from) when git lacks it."""
    p = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if p.returncode != 0:
        raise UsageError(
            f"{what} {ref} is not a commit of {repo}",
            "fetch it into that repository, or give --commits A..B with commits it has",
        )
    return p.stdout.decode().strip()


def log(repo: Path, base: str, head: str) -> list[Commit]:
    """The first-parent commits of base..head, oldest first, each with its diff against its first
    parent (merges too), in one git call."""
    p = _git(
        repo,
        "log",
        "--first-parent",
        "--diff-merges=first-parent",
        "--find-renames",  # a renamed file keeps its history: hunks against the old path
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--raw",
        "--no-abbrev",
        "-p",
        "--unified=0",
        "--format=\x1e%H%x1f%s%x1f%an <%ae>%x1f%aI",
        f"{base}..{head}",
    )
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip().splitlines()
        raise ToolError(
            f"git log {base[:12]}..{head[:12]} failed in {repo}: {err[-1] if err else p.returncode}"
        )
    commits: list[Commit] = []
    cur: FileDiff | None = None
    header = False  # between `diff --git` and the first hunk: `---`/`+++` name the file there
    minus: str | None = None  # the `--- a/PATH` of this file's header (a deletion's only name)
    for raw in p.stdout.split(b"\n"):
        if raw.startswith(_SEP):
            fields = raw[1:].decode(errors="replace").split("\x1f")
            sha, subject, author, date = (fields + [""] * 3)[:4]
            commits.append(Commit(sha, subject, author, date))
            cur, header = None, False
        elif not commits:
            continue
        elif raw.startswith(b"@@"):
            header = False
            m = _HUNK.match(raw)
            if m and cur is not None:
                a, b, c, d = m.groups()
                cur.hunks.append(
                    (int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d))
                )
                if len(cur.text) < TEXT_MAX:
                    cur.text.append(raw.decode(errors="replace"))
        elif raw.startswith(b"diff --git "):
            cur, header, minus = None, True, None
        elif header and raw.startswith(b"--- "):
            minus = raw[6:].decode(errors="replace") if raw.startswith(b"--- a/") else None
        elif header and raw.startswith(b"+++ "):
            # files are keyed by the path after the commit (a rename's new name); a deletion
            # (`+++ /dev/null`) by the path it had
            path = raw[6:].decode(errors="replace") if raw.startswith(b"+++ b/") else minus
            if path is not None:
                cur = commits[-1].files.setdefault(path, FileDiff(path))
        elif raw.startswith(b":"):  # --raw: modes, blob ids, status, path (old TAB new: rename)
            meta, _, name = raw.partition(b"\t")
            parts = meta.split()
            if len(parts) >= 5:
                names = name.decode(errors="replace").split("\t")
                path = names[-1]
                fd = commits[-1].files.setdefault(path, FileDiff(path))
                if parts[4].startswith(b"R") and len(names) == 2:
                    fd.old_path = names[0]
                old, new = parts[2].decode(), parts[3].decode()
                fd.old_blob = None if old == _NULL_SHA else old
                fd.new_blob = None if new == _NULL_SHA else new
        elif cur is not None and not header and len(cur.text) < TEXT_MAX:
            if raw[:1] in (b"+", b"-"):
                cur.text.append(raw.decode(errors="replace"))
    commits.reverse()
    return commits


def diff_of(c: Commit, path: str, forward: bool) -> FileDiff | None:
    """Commit c's diff of the file at `path` before it (forward) or after it (not forward),
    through a rename: forward, the diff renaming `path` away counts as its diff."""
    if forward:
        for d in c.files.values():
            if d.old_path == path:
                return d
        fd = c.files.get(path)
        return fd if fd is not None and fd.old_path is None else None
    return c.files.get(path)


def path_across(fd: FileDiff, forward: bool) -> str:
    """The file's path on the other side of the commit whose diff is fd."""
    if forward:
        return fd.path
    return fd.old_path or fd.path


def tree_paths(repo: Path, rev: str) -> list[str]:
    """Every file path of the tree at `rev`."""
    p = _git(repo, "ls-tree", "-r", "-z", "--name-only", rev)
    if p.returncode != 0:
        raise ToolError(f"git ls-tree {rev[:12]} failed in {repo}")
    return [x for x in p.stdout.decode(errors="replace").split("\0") if x]


def blobs(repo: Path, names: Iterable[str]) -> dict[str, bytes]:
    """name → content for object names (blob ids or `rev:path`), in one `git cat-file --batch`;
    names git does not have are left out."""
    want = list(dict.fromkeys(names))
    if not want:
        return {}
    p = _git(repo, "cat-file", "--batch", stdin="".join(f"{n}\n" for n in want).encode())
    out: dict[str, bytes] = {}
    data, pos = p.stdout, 0
    for name in want:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        header = data[pos:nl].split()
        pos = nl + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            out[name] = data[pos : pos + size]
            pos += size + 1
        elif len(header) == 3:  # a tree or other object: skip its body
            pos += int(header[2]) + 1
    return out
