"""Commit suspects: the commits of a range ranked by how much of the change runs through the
code they touched (issue 19).

Stage: after the engine. Input: a Comparison's `launch_stacks` and `attribution`, a git
repository and the range BASE..HEAD (the commits the two sides were captured at); output:
`Suspects` (report/suspects_json.py renders it).

The rule. Each contributor that moved (the significant ones, or all when none is) weighs its
|delta|. Its launch stacks' frames are mapped onto repo paths by suffix (a frame's file is
relative to the workload's working directory, or absolute: `/tmp/wt/minispec/layers.py` and
`minispec/layers.py` both map onto the repo's `minispec/layers.py`; library frames are left out,
parse/stacks/library.is_library; a name two repo files fit equally is left out). A frame names its
function by (name, first line) at its side's commit (base or head), found there with Python's
`ast` (two parses per file, not two per file and commit) and carried to every commit of the
range through the hunks in between (linemap.py). A commit's hunks (both sides
of its diff) then hit each stack frame as one of
  line      a stack line: the frame's own first line, or a line calling the next frame of the
            stack (the callee's name: `<built-in function gelu>` is a call of `gelu`)   weight 1.0
  function  elsewhere in the extent of that function                                   weight 0.5
  branch    only inside conditional blocks (`if`/`else` bodies, `except` handlers) of that
            function that hold none of the stack's calls to the next frame, so they may not
            have run (told only where those calls are found)                           weight 0.25
  file      elsewhere in the frame's file                                              weight 0.1
and the k-th mapped frame out from the launching one weighs DEPTH_DECAY**k of that, so the
launching function weighs most and its callers less. A stack's hit is its best frame's; a
commit's score is the sum over contributors of |delta| x sum over their stacks of (the stack's
share of the contributor's time x its hit). `share` is the part of the weighed |delta| whose
stacks run through a function the commit changed (line, function or branch hits), `delta_ms_per_cycle`
those contributors' summed change. Non-Python files have no extents: file hits only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracediff.parse.stacks.library import is_library
from tracediff.suspects import gitlog, linemap, pysource
from tracediff.suspects.linemap import Span
from tracediff.suspects.nostacks import NO_STACKS

KIND_WEIGHT = {"line": 1.0, "function": 0.5, "branch": 0.25, "file": 0.1}
DEPTH_DECAY = 0.3
HUNK_LINES = 16
"""Lines of the diff kept per suspect (`hunk`: the file of its heaviest evidence)."""
EVIDENCE_MAX = 12
"""Evidence rows kept per suspect (the best hit of each contributor, largest |delta| first)."""


@dataclass
class Suspects:
    base: str
    head: str
    range_from: str  # "--commits" | "capture manifests"
    commits: int  # first-parent commits in the range
    rows: list[dict[str, Any]] = field(default_factory=list)  # sorted, score > 0 only
    notes: list[str] = field(default_factory=list)  # why there are none, what was left out


@dataclass(frozen=True)
class _Frame:
    side: str
    path: str  # repo path
    function: str
    line: int | None
    callee: str | None  # the name the next frame of the stack is called by


def map_paths(files: list[str], repo_paths: set[str]) -> dict[str, str]:
    """frame file → repo path, by the longest common run of trailing path components (at least
    the repo path's own name); names that two repo paths fit equally are left out."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for p in repo_paths:
        by_name[p.rsplit("/", 1)[-1]].append(p)
    out: dict[str, str] = {}
    for f in files:
        parts = [x for x in f.replace("\\", "/").split("/") if x not in ("", ".")]
        if not parts:
            continue
        best, best_n, tie = None, 0, False
        for p in by_name.get(parts[-1], []):
            pp = p.split("/")
            n = 0
            while n < min(len(pp), len(parts)) and pp[-1 - n] == parts[-1 - n]:
                n += 1
            if n < min(len(pp), len(parts)):
                continue  # neither ends with the other
            if n > best_n:
                best, best_n, tie = p, n, False
            elif n == best_n:
                tie = True
        if best is not None and not tie:
            out[f] = best
    return out


def _spans_hit(ranges: list[Span], spans: list[Span]) -> bool:
    return any(a <= d and c <= b for a, b in ranges for c, d in spans)


@dataclass(frozen=True)
class _Shape:
    """A frame's function in one version: its extent, its first lines (decorators to def), the
    calls of the next frame, and the conditional blocks holding none of those calls."""

    ext: Span
    head: Span
    calls: tuple[Span, ...]
    dead: tuple[Span, ...]

    def carried(self, hunks: list[linemap.Hunk], forward: bool) -> _Shape:
        spans = [self.ext, self.head, *self.calls, *self.dead]
        m = linemap.carry(spans, hunks, forward)
        n = len(self.calls)
        return _Shape(m[0], m[1], tuple(m[2 : 2 + n]), tuple(m[2 + n :]))


def _shape(f: pysource.Func, callee: str | None) -> _Shape:
    calls = tuple(f.calls.get(callee, [])) if callee else ()
    dead = tuple(b for b in f.branches if not _spans_hit([b], list(calls)))
    return _Shape((f.first, f.last), (f.first, f.def_line), calls, dead)


def _kind(old: _Shape, new: _Shape, fd: gitlog.FileDiff) -> str:
    """How one commit's diff of the frame's file hits the frame (line, function, branch, file)."""
    best = "file"
    sides = (
        (new, [(c, c + d - 1) for _, _, c, d in fd.hunks if d > 0]),
        (old, [(a, a + b - 1) for a, b, _, _ in fd.hunks if b > 0]),
    )
    for sh, ranges in sides:
        if not ranges:
            continue
        if _spans_hit(ranges, [sh.head, *sh.calls]):
            return "line"
        lo, hi = sh.ext
        inside = [(max(a, lo), min(b, hi)) for a, b in ranges if a <= hi and lo <= b]
        if not inside:
            continue
        # a change only inside conditional blocks that hold none of the stack's calls may not
        # have run: "branch" (known only where the next frame's calls are found)
        off = bool(sh.calls) and all(any(c <= a and b <= d for c, d in sh.dead) for a, b in inside)
        kind = "branch" if off else "function"
        if KIND_WEIGHT[kind] > KIND_WEIGHT[best]:
            best = kind
    return best


def _kinds(
    frames: set[_Frame], shapes: dict[_Frame, _Shape | None], commits: list[gitlog.Commit]
) -> tuple[list[dict[_Frame, str]], list[dict[_Frame, str]]]:
    """Per commit, how its diff hits each frame of a file it touched, and that file's path in
    the commit's diff: a base-side frame's function is carried forward from base through the
    commits, a head-side one back from head, each through the file's renames (a head-side
    frame of `new.py` meets the commits that changed `old.py` before the rename)."""
    out: list[dict[_Frame, str]] = [{} for _ in commits]
    paths: list[dict[_Frame, str]] = [{} for _ in commits]
    by_path: dict[str, list[int]] = defaultdict(list)  # a path -> the commits touching it
    for i, c in enumerate(commits):
        for fd in c.files.values():
            for p in {fd.path, fd.old_path or fd.path}:
                by_path[p].append(i)
    for f in frames:
        cur = shapes.get(f)
        forward = f.side == "base"
        path, pos = f.path, -1 if forward else len(commits)
        while True:
            later = [i for i in by_path.get(path, []) if (i > pos if forward else i < pos)]
            if not later:
                break
            pos = min(later) if forward else max(later)
            got = gitlog.diff_of(commits[pos], path, forward)
            if got is None:  # the commit touched another file of that name (added over it)
                continue
            fd = got
            paths[pos][f] = fd.path
            path = gitlog.path_across(fd, forward)
            if cur is None:
                out[pos][f] = "file"
                continue
            nxt = cur.carried(fd.hunks, forward)
            old, new = (cur, nxt) if forward else (nxt, cur)
            out[pos][f] = _kind(old, new, fd)
            cur = nxt
    return out, paths


_StackKey = tuple[str, str, int]
"""A launch stack of one contributor on one side: (contributor_id, side, stack_id)."""
_Stacks = dict[_StackKey, tuple[float, list[_Frame]]]
"""Each stack's share and its frames mapped to repo files, innermost first (k = index)."""


def rank(
    launch_stacks: pl.DataFrame,
    attribution: pl.DataFrame,
    repo: Path,
    base: str,
    head: str,
    range_from: str,
    no_stacks: str = NO_STACKS,
) -> Suspects:
    """The suspects of base..head (full shas of `repo`) for this comparison; `no_stacks`: what
    to say when the runs have no launch stacks (nostacks.why_no_stacks)."""
    commits = gitlog.log(repo, base, head)
    out = Suspects(base, head, range_from, len(commits))
    if not commits:
        out.notes.append(f"no commits between {base[:12]} and {head[:12]}")
        return out
    if not launch_stacks.height:
        out.notes.append(no_stacks)
        return out
    att = attribution.select("contributor_id", "delta_ms_per_cycle", "significant")
    with_stacks = att.filter(
        pl.col("contributor_id").is_in(launch_stacks["contributor_id"].unique().implode())
    )
    moved = with_stacks.filter(pl.col("significant").fill_null(False))
    if not moved.height:
        moved = with_stacks
        out.notes.append("no contributor with launch stacks moved significantly: all weighed")
    weight = {
        r["contributor_id"]: abs(r["delta_ms_per_cycle"] or 0.0)
        for r in moved.iter_rows(named=True)
    }
    delta = {r["contributor_id"]: r["delta_ms_per_cycle"] for r in moved.iter_rows(named=True)}
    ls = launch_stacks.filter(pl.col("contributor_id").is_in(list(weight)))
    files = ls.filter(pl.col("file").is_not_null() & ~is_library(pl.col("file")))["file"]
    repo_paths = set(gitlog.tree_paths(repo, head)) | set(gitlog.tree_paths(repo, base))
    repo_paths |= {p for c in commits for d in c.files.values() for p in (d.path, d.old_path) if p}
    path_of = map_paths(files.unique().to_list(), repo_paths)
    if not path_of:
        some = files.unique().sort().head(2).to_list()
        out.notes.append(
            f"no file of the launch stacks is in {repo}"
            + (f" (e.g. {', '.join(some)})" if some else " (no user frames)")
        )
        return out

    stacks = _stacks(ls, path_of)
    frames = {f for _, fl in stacks.values() for f in fl}
    qual, shapes = _resolve(frames, repo, {"base": base, "head": head})
    kinds_of, paths_of = _kinds(frames, shapes, commits)
    index: dict[_Frame, list[tuple[_StackKey, int]]] = defaultdict(list)
    for key, (_, fl) in stacks.items():
        for k, f in enumerate(fl):
            index[f].append((key, k))
    total = sum(weight.values()) or 1.0
    for pos, c in enumerate(commits):
        kinds = kinds_of[pos]
        if not kinds:
            continue
        row = _commit_row(c, kinds, index, stacks, weight, delta, total, qual, paths_of[pos])
        if row is not None:
            out.rows.append({**row, "_pos": pos})
    out.rows.sort(key=lambda r: (-r["score"], r["_pos"]))
    for r in out.rows:
        del r["_pos"]
    if not out.rows:
        names = sorted({f.path for f in frames})
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        out.notes.append(
            f"none of the {len(commits)} commits touched a file of the moved contributors' "
            f"launch stacks ({', '.join(names[:3])}{more}); CUDA-graph replays are launched "
            "from the replay call until capture-time stacks are recorded"
        )
    return out


def _stacks(ls: pl.DataFrame, path_of: dict[str, str]) -> _Stacks:
    """Every stack of `ls` (launch_stacks rows): its share and its frames in repo files
    (`path_of`), innermost first, each with the name its callee is called by."""
    stacks: _Stacks = {}
    rows = ls.sort("contributor_id", "side", "stack_id", "depth").iter_rows(named=True)
    prev: dict[str, Any] | None = None
    for r in rows:
        key = (r["contributor_id"], r["side"], r["stack_id"])
        callee = None
        if prev is not None and (prev["contributor_id"], prev["side"], prev["stack_id"]) == key:
            callee = pysource.callee_name(prev["function"])
        prev = r
        entry = stacks.setdefault(key, (r["share"], []))
        path = path_of.get(r["file"]) if r["file"] is not None else None
        if path is not None:
            entry[1].append(_Frame(r["side"], path, r["function"], r["line"], callee))
    return stacks


def _resolve(
    frames: set[_Frame], repo: Path, at: dict[str, str]
) -> tuple[dict[_Frame, str | None], dict[_Frame, _Shape | None]]:
    """Each frame's function found in its side's source (`at`: side -> commit): its qualified
    name and its shape (None where the file is not Python or the function is not found)."""
    cap = gitlog.blobs(repo, {f"{at[f.side]}:{f.path}" for f in frames if f.path.endswith(".py")})
    parsed = {name: pysource.parse(data) for name, data in cap.items()}
    qual: dict[_Frame, str | None] = {}
    shapes: dict[_Frame, _Shape | None] = {}
    for f in frames:
        src = parsed.get(f"{at[f.side]}:{f.path}")
        found = src.find(f.function, f.line) if src is not None else None
        qual[f] = found.qualname if found is not None else None
        shapes[f] = _shape(found, f.callee) if found is not None else None
    return qual, shapes


def _commit_row(
    c: gitlog.Commit,
    kinds: dict[_Frame, str],
    index: dict[_Frame, list[tuple[_StackKey, int]]],
    stacks: _Stacks,
    weight: dict[str, float],
    delta: dict[str, float],
    total: float,
    qual: dict[_Frame, str | None],
    path_at: dict[_Frame, str],
) -> dict[str, Any] | None:
    """Commit `c`'s suspect row: what it changed (`kinds`: frame -> how) weighed over the
    stacks running through it; None where no stack runs through what it changed."""
    per_stack: dict[_StackKey, tuple[float, int, _Frame, str]] = {}
    through: set[str] = set()  # contributors whose stacks run through a function it changed
    for f, kind in kinds.items():
        for key, k in index[f]:
            w = KIND_WEIGHT[kind] * DEPTH_DECAY**k
            had = per_stack.get(key)
            if had is None or (w, -k) > (had[0], -had[1]):  # innermost of equal weights
                per_stack[key] = (w, k, f, kind)
            if kind != "file":
                through.add(key[0])
    score = 0.0
    best_of: dict[str, tuple[float, _Frame, str]] = {}
    for key, (w, _k, f, kind) in per_stack.items():
        cid = key[0]
        score += weight[cid] * stacks[key][0] * w
        if cid not in best_of or w > best_of[cid][0]:
            best_of[cid] = (w, f, kind)
    if not best_of:
        return None
    hit = list(through)
    changed_w = sum(weight[cid] for cid in hit)
    changed_d = sum(delta[cid] for cid in hit)
    order = sorted(best_of, key=lambda cid: (-weight[cid], cid))
    funcs = sorted(
        {f"{path_at[f]}:{qual.get(f) or f.function}" for f, kind in kinds.items() if kind != "file"}
    )
    return {
        "commit": c.sha,
        "subject": c.subject,
        "author": c.author,
        "date": c.date,
        "score": score,
        "share": changed_w / total,
        "delta_ms_per_cycle": changed_d,
        "files": sorted(c.files),
        "functions": funcs,
        "contributors": sorted(hit, key=lambda cid: (-weight[cid], cid)),
        "evidence": [
            {
                "contributor": cid,
                "file": best_of[cid][1].path,
                "line": best_of[cid][1].line,
                "function": best_of[cid][1].function,
                "kind": best_of[cid][2],
            }
            for cid in order[:EVIDENCE_MAX]
        ],
        "hunk": c.files[path_at[best_of[order[0]][1]]].text[:HUNK_LINES],
    }
