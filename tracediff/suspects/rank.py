"""Commit suspects: the commits of a range ranked by how much of the change runs through the
code they touched (issue 19).

Stage: after the engine. Input: a Comparison's `launch_stacks` and `attribution`, a git
repository and the range BASE..HEAD (the commits the two sides were captured at); output:
`Suspects` (report/suspects_json.py renders it).

The rule. Each contributor that moved (the significant ones, or all when none is) weighs its
|delta|. Its launch stacks' frames are mapped onto repo paths by suffix (a frame's file is
relative to the workload's working directory, or absolute: `/tmp/wt/minispec/layers.py` and
`minispec/layers.py` both map onto the repo's `minispec/layers.py`; library frames are left out,
engine/sources.is_library; a name two repo files fit equally is left out). A frame names its
function by (name, first line) at its side's commit (base or head), found there with Python's
`ast` and followed to every commit of the range by qualified name. A commit's hunks (both sides
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

from tracediff.engine.sources import is_library
from tracediff.suspects import gitlog, pysource

KIND_WEIGHT = {"line": 1.0, "function": 0.5, "branch": 0.25, "file": 0.1}
DEPTH_DECAY = 0.3
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


def _spans_hit(ranges: list[tuple[int, int]], spans: list[tuple[int, int]]) -> bool:
    return any(a <= d and c <= b for a, b in ranges for c, d in spans)


def _kind(
    fr: _Frame,
    qualname: str | None,
    fd: gitlog.FileDiff,
    old: pysource.Source | None,
    new: pysource.Source | None,
) -> str:
    """How this commit's diff of the frame's file hits the frame (line, function or file)."""
    best = "file"
    sides = (
        (new, [(c, c + d - 1) for _, _, c, d in fd.hunks if d > 0]),
        (old, [(a, a + b - 1) for a, b, _, _ in fd.hunks if b > 0]),
    )
    for src, ranges in sides:
        if src is None or not ranges:
            continue
        f = src.by_qualname(qualname) if qualname else src.find(fr.function, None)
        if f is None:
            continue
        calls = f.calls.get(fr.callee, []) if fr.callee else []
        if _spans_hit(ranges, [(f.first, f.def_line), *calls]):
            return "line"
        inside = [
            (max(a, f.first), min(b, f.last)) for a, b in ranges if a <= f.last and f.first <= b
        ]
        if not inside:
            continue
        # a change only inside conditional blocks that hold none of the stack's calls may not
        # have run: "branch" (known only where the next frame's calls are found)
        dead = [blk for blk in f.branches if not _spans_hit([blk], calls)]
        off = calls and all(any(c <= a and b <= d for c, d in dead) for a, b in inside)
        kind = "branch" if off else "function"
        if KIND_WEIGHT[kind] > KIND_WEIGHT[best]:
            best = kind
    return best


def rank(
    launch_stacks: pl.DataFrame,
    attribution: pl.DataFrame,
    repo: Path,
    base: str,
    head: str,
    range_from: str,
) -> Suspects:
    """The suspects of base..head (full shas of `repo`) for this comparison."""
    commits = gitlog.log(repo, base, head)
    out = Suspects(base, head, range_from, len(commits))
    if not commits:
        out.notes.append(f"no commits between {base[:12]} and {head[:12]}")
        return out
    if not launch_stacks.height:
        out.notes.append("the runs have no launch stacks (Kineto with_stack traces carry them)")
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
    repo_paths |= {p for c in commits for p in c.files}
    path_of = map_paths(files.unique().to_list(), repo_paths)
    if not path_of:
        some = files.unique().sort().head(2).to_list()
        out.notes.append(
            f"no file of the launch stacks is in {repo}"
            + (f" (e.g. {', '.join(some)})" if some else " (no user frames)")
        )
        return out

    # every stack: its mapped frames, innermost first (k = index), with its share
    stacks: dict[tuple[str, str, int], tuple[float, list[_Frame]]] = {}
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

    frames = {f for _, fl in stacks.values() for f in fl}
    at = {"base": base, "head": head}
    cap = gitlog.blobs(repo, {f"{at[f.side]}:{f.path}" for f in frames if f.path.endswith(".py")})
    parsed: dict[str, pysource.Source | None] = {}

    def source(name: str | None, data: bytes | None) -> pysource.Source | None:
        if name is None or data is None:
            return None
        if name not in parsed:
            parsed[name] = pysource.parse(data)
        return parsed[name]

    qual: dict[_Frame, str | None] = {}
    for f in frames:
        name = f"{at[f.side]}:{f.path}"
        src = source(name, cap.get(name))
        found = src.find(f.function, f.line) if src is not None else None
        qual[f] = found.qualname if found is not None else None

    stacked_paths = {f.path for f in frames}
    need = {
        b
        for c in commits
        for p, fd in c.files.items()
        if p in stacked_paths and p.endswith(".py")
        for b in (fd.old_blob, fd.new_blob)
        if b
    }
    data = gitlog.blobs(repo, need)
    total = sum(weight.values()) or 1.0
    for pos, c in enumerate(commits):
        touched = [p for p in c.files if p in stacked_paths]
        if not touched:
            continue
        kinds: dict[_Frame, str] = {}
        for p in touched:
            fd = c.files[p]
            py = p.endswith(".py")
            old = source(fd.old_blob, data.get(fd.old_blob or "")) if py else None
            new = source(fd.new_blob, data.get(fd.new_blob or "")) if py else None
            for f in frames:
                if f.path == p:
                    kinds[f] = _kind(f, qual[f], fd, old, new) if py else "file"
        score = 0.0
        best_of: dict[str, tuple[float, _Frame, str]] = {}
        through: set[str] = set()  # contributors whose stacks run through a function it changed
        for (cid, _side, _sid), (share, fl) in stacks.items():
            hits = [
                (KIND_WEIGHT[kinds[f]] * DEPTH_DECAY**k, f, kinds[f])
                for k, f in enumerate(fl)
                if f in kinds
            ]
            if not hits:
                continue
            best = max(hits, key=lambda h: h[0])  # the first (innermost) of equal weights
            score += weight[cid] * share * best[0]
            if any(h[2] != "file" for h in hits):
                through.add(cid)
            if cid not in best_of or best[0] > best_of[cid][0]:
                best_of[cid] = best
        if not best_of:
            continue
        hit = list(through)
        changed_w = sum(weight[cid] for cid in hit)
        changed_d = sum(delta[cid] for cid in hit)
        order = sorted(best_of, key=lambda cid: (-weight[cid], cid))
        funcs = sorted(
            {f"{f.path}:{qual.get(f) or f.function}" for f, kind in kinds.items() if kind != "file"}
        )
        out.rows.append(
            {
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
                "_pos": pos,
            }
        )
    out.rows.sort(key=lambda r: (-r["score"], r["_pos"]))
    for r in out.rows:
        del r["_pos"]
    if not out.rows:
        out.notes.append(
            f"none of the {len(commits)} commits touched a file of the launch stacks "
            f"({len(stacked_paths)} file{'s' if len(stacked_paths) != 1 else ''} in {repo.name})"
        )
    return out
