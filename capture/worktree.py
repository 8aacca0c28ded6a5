"""The code under test: a detached git worktree of one commit, made and removed around a capture.

Stage: capture, before the workload. Input: a repository and a ref; output: a temporary folder
holding that commit's tree, plus the state of the user's own checkout (HEAD, dirty flag and count
of changed files, a hash of `git diff HEAD`). The user's working tree and index are never touched:
`git worktree add` only writes under .git/worktrees/, and that entry is pruned when the capture
ends. On request the user's `git diff HEAD` is applied to the worktree (never to the checkout).
The history `tracediff bisect` walks is read here too: the first-parent commits of a range and
what a commit is (subject, author, date, files changed), all read-only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracediff.base.errors import ToolError, UsageError

WT_PREFIX = "tracediff-wt-"
OWNER = "owner.pid"  # beside the worktree, in its temp parent: the capturing process


def _git(
    repo: Path, *args: str, check: bool = True, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    git = shutil.which("git")
    if git is None:
        raise ToolError("git is not installed", "install git (apt-get install git)")
    proc = subprocess.run(
        [git, "-C", str(repo), *args], capture_output=True, check=False, input=stdin
    )
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise ToolError(
            f"git {' '.join(args)} failed in {repo}: {err[-1] if err else proc.returncode}"
        )
    return proc


def toplevel(repo: Path) -> Path:
    """The repository root containing `repo`; UsageError when it is not a git checkout."""
    if not Path(repo).is_dir():
        raise UsageError(
            f"{repo}: no such folder", "give --repo the checkout of the code to profile"
        )
    proc = _git(repo, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise UsageError(
            f"{repo}: not a git repository", "give --repo the checkout of the code to profile"
        )
    return Path(proc.stdout.decode().strip())


def resolve(repo: Path, ref: str) -> str:
    """Full commit sha of `ref`; UsageError naming the ref when git does not know it."""
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise UsageError(
            f"{repo}: no commit {ref!r}",
            "give --commit a branch, tag or sha that exists (git fetch?)",
        )
    return proc.stdout.decode().strip()


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    """Whether commit a is an ancestor of commit b (or b itself)."""
    return _git(repo, "merge-base", "--is-ancestor", a, b, check=False).returncode == 0


def first_parent(repo: Path, a: str, b: str) -> list[str]:
    """The first-parent commits of a..b, oldest first (full shas)."""
    out = _git(repo, "rev-list", "--first-parent", "--reverse", f"{a}..{b}").stdout
    return out.decode().split()


def commit_info(repo: Path, sha: str) -> dict[str, Any]:
    """A commit's subject, author ("name <email>"), author date (ISO) and the files it changed
    against its first parent (a merge's too)."""
    fmt = _git(repo, "show", "-s", "--format=%s%x00%an <%ae>%x00%aI", sha).stdout.decode()
    subject, author, date = (fmt.strip().split("\x00") + ["", "", ""])[:3]
    files = _git(
        repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "-m", "--first-parent", sha
    ).stdout.decode()
    return {"subject": subject, "author": author, "date": date, "files": files.split()}


def user_tree_state(repo: Path) -> dict[str, Any]:
    """HEAD, branch and dirtiness of the user's checkout (recorded, never changed)."""
    head = _git(repo, "rev-parse", "--verify", "--quiet", "HEAD", check=False)
    branch = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    status = _git(repo, "status", "--porcelain", "--untracked-files=normal").stdout.decode()
    lines = [ln for ln in status.splitlines() if ln]
    untracked = sum(1 for ln in lines if ln.startswith("??"))
    diff = (
        _git(repo, "diff", "HEAD", "--binary", check=False).stdout if head.returncode == 0 else b""
    )
    return {
        "repo": str(repo),
        "user_head": head.stdout.decode().strip() or None,
        "user_branch": branch.stdout.decode().strip() or None,
        # dirty: tracked files differ from HEAD; untracked files are counted apart
        "dirty": len(lines) - untracked > 0,
        "dirty_files": len(lines) - untracked,
        "untracked_files": untracked,
        "diff_sha256": hashlib.sha256(diff).hexdigest() if diff else None,
        "diff_bytes": len(diff),
    }


def dirty_warning(git: dict[str, Any], sha: str, included: bool) -> str | None:
    """The line that says the user's uncommitted edits are (not) in what is profiled."""
    n = git.get("dirty_files") or 0
    if not n:
        return None
    files = f"{n} file{'s' if n != 1 else ''} with uncommitted changes in {git['repo']}"
    if included:
        u = git.get("untracked_files") or 0
        # untracked files stay out: OUTDIR itself is often an untracked folder of the checkout
        left = f"; {u} untracked file{'s' if u != 1 else ''} not copied (git add them)" if u else ""
        return f"{files}: applied to the worktree at {sha[:12]} (--include-uncommitted){left}"
    return (
        f"{files}: the worktree at {sha[:12]} does not contain them, so they are NOT profiled "
        "(commit them, or pass --include-uncommitted when profiling HEAD)"
    )


def uncommitted_diff(repo: Path) -> bytes:
    """`git diff HEAD --binary` of the user's checkout: the tracked edits, staged or not."""
    return _git(repo, "diff", "HEAD", "--binary").stdout


@contextlib.contextmanager
def worktree(repo: Path, sha: str, patch: bytes | None = None) -> Iterator[Path]:
    """A detached worktree of `sha` in a temp folder (with `patch` applied), removed on exit.

    The temp folder names its owners (OWNER: our pid, then nsys's, see `add_owner`), so a later
    capture can remove the worktree of a capture that was killed (SIGKILL, a timeout) once none
    of them runs, instead of leaving it registered in .git/worktrees and checked out in /tmp."""
    remove_stale(repo)
    parent = Path(tempfile.mkdtemp(prefix=WT_PREFIX))
    (parent / OWNER).write_text(str(os.getpid()))
    path = parent / sha[:12]
    try:
        _git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
        if (path / ".gitmodules").exists():
            _git(path, "submodule", "update", "--init", "--recursive", "--quiet")
        if patch:
            _git(path, "apply", "--binary", "--whitespace=nowarn", "-", stdin=patch)
        yield path
    finally:
        _git(repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(parent, ignore_errors=True)
        _git(repo, "worktree", "prune", check=False)


def remove_stale(repo: Path) -> list[Path]:
    """Remove the worktrees of `repo` left by dead tracediff captures; the ones removed."""
    listed = _git(repo, "worktree", "list", "--porcelain", check=False).stdout.decode()
    gone = []
    for line in listed.splitlines():
        path = Path(line.removeprefix("worktree ")) if line.startswith("worktree ") else None
        if path is None or not path.parent.name.startswith(WT_PREFIX):
            continue
        try:
            pids = [int(p) for p in (path.parent / OWNER).read_text().split()]
        except (OSError, ValueError):
            continue  # not made by this version, or being made right now: not ours to judge
        if not pids or any(_alive(p) for p in pids):  # an orphaned nsys may still run in it
            continue
        _git(repo, "worktree", "remove", "--force", str(path), check=False)
        shutil.rmtree(path.parent, ignore_errors=True)
        gone.append(path)
    if gone:
        _git(repo, "worktree", "prune", check=False)
    return gone


def add_owner(tree: Path, pid: int) -> None:
    """Record another process (nsys) working in the worktree `tree` (one made by `worktree`)."""
    owner = tree.parent / OWNER
    if owner.is_file():
        with contextlib.suppress(OSError), open(owner, "a") as f:
            f.write(f" {pid}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    try:  # a zombie (an orphaned nsys whose parent never reaped it) answers kill(0) too
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" not in status
