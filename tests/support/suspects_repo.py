"""A git repository whose Python files sit where a real trace's launch stacks point (issue 19).

For the commit-suspects tests and bench: every frame of the stacks under `prefix` (e.g. the
TraceLens SGLang traces' `/sgl-workspace/sglang/python/`) becomes, in `python/<rest>`, a method
whose `def` is on the frame's line (the Kineto frame line is the function's first line), inside a
class `K<line>` one line above, with the body

    _x = 0                 (a straight-line statement: an edit here is a "function" hit)
    if self is None:
        pass  # unused     (a branch holding none of the stack's calls: a "branch" hit)
    <callee>()             (one call per name the next frame of a stack is called by)
    return _x

cut short where the next frame of the file follows too closely. Commits are made with fixed
names and dates, so the hashes are the same on every run.
"""

from __future__ import annotations

import os
import subprocess
from collections import defaultdict
from pathlib import Path

import polars as pl

from tracediff.suspects.pysource import callee_name

ENV = {
    "GIT_AUTHOR_NAME": "dev",
    "GIT_AUTHOR_EMAIL": "dev@example.invalid",
    "GIT_COMMITTER_NAME": "dev",
    "GIT_COMMITTER_EMAIL": "dev@example.invalid",
}


def git(repo: Path, *args: str, stamp: int = 0) -> str:
    date = f"2026-12-01T10:{stamp // 60:02d}:{stamp % 60:02d}Z"
    env = {**os.environ, **ENV, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    out = subprocess.run(
        ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return out.stdout.strip()


def frame_files(launch_stacks: pl.DataFrame, prefix: str) -> dict[str, dict[int, set[str]]]:
    """repo path → {frame line → the callee names its function calls (from the stacks)}."""
    ls = launch_stacks.sort("contributor_id", "side", "stack_id", "depth")
    out: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    names: dict[tuple[str, int], str] = {}
    prev = None
    for r in ls.iter_rows(named=True):
        key = (r["contributor_id"], r["side"], r["stack_id"])
        f = r["file"]
        if f is not None and f.startswith(prefix) and r["line"] is not None:
            path = "python/" + f[len(prefix) :]
            names[(path, r["line"])] = r["function"]
            calls = out[path][r["line"]]
            if prev is not None and prev[0] == key:
                callee = callee_name(prev[1])
                if callee:
                    calls.add(callee)
        prev = (key, r["function"])
    return {p: {ln: {f"{names[(p, ln)]}\x00", *c} for ln, c in d.items()} for p, d in out.items()}


def render(lines: dict[int, set[str]], pad: bool = False) -> str:
    """The text of one file: each frame's class and method at its line; `pad`: the lines between
    them hold module-level statements (`_p12 = 12`: a file as long as real code), else blank."""
    text: dict[int, str] = {}
    order = sorted(lines)
    for i, ln in enumerate(order):
        fn = next(x[:-1] for x in lines[ln] if x.endswith("\x00"))
        calls = sorted(x for x in lines[ln] if not x.endswith("\x00"))
        nxt = order[i + 1] - 1 if i + 1 < len(order) else 10**9  # the next class line
        text[ln - 1] = f"class K{ln}:"
        text[ln] = f"    def {fn}(self):"
        body = ["_x = 0", "if self is None:", "    pass  # unused"]
        body += [f"{c}()" for c in calls] + ["return _x"]
        room = nxt - ln - 1
        if room < len(body):
            body = ["pass"] if room < 5 else body[: room - 1] + ["return _x"]
        for j, b in enumerate(body):
            text[ln + 1 + j] = "        " + b
    last = max(text)
    fill = (lambda i: f"_p{i} = {i}") if pad else (lambda i: "")
    return "\n".join(text.get(i, fill(i)) for i in range(1, last + 1)) + "\n"


def build(repo: Path, files: dict[str, dict[int, set[str]]], pad: bool = False) -> str:
    """A new repository at `repo` holding the files; returns the first commit's sha."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for path, lines in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(render(lines, pad))
    (repo / "README.md").write_text("sglang, as far as the stacks go\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return git(repo, "rev-parse", "HEAD")


def edit(repo: Path, path: str, line: int, new: str, subject: str, stamp: int) -> str:
    """Replace one line (1-based; past the end: append) and commit; returns the sha."""
    f = repo / path
    text = f.read_text().split("\n")
    if line <= len(text) - 1:
        text[line - 1] = new
    else:
        text[-1:] = [new, ""]
    f.write_text("\n".join(text))
    git(repo, "commit", "-q", "-am", subject, stamp=stamp)
    return git(repo, "rev-parse", "HEAD")


def line_of(repo: Path, path: str, after: int, needle: str) -> int:
    """The first line at or after `after` holding `needle`."""
    for i, t in enumerate((repo / path).read_text().split("\n"), 1):
        if i >= after and needle in t:
            return i
    raise AssertionError(f"{needle!r} not in {path} after line {after}")
