"""`tracediff bisect`'s result: each culprit as reported, and the whole result dict.

Stage: bisect (the end of tracediff/bisect/bisection.py's algorithm; called by tracediff/bisect/search.py).
Input: a `Bisection` after its searches; output: the result dict (the JSON of `tracediff bisect
--format json`, rendered by tracediff/report/bisect.py), also kept in bisect.json.
"""

from __future__ import annotations

import math
import shlex
import time
from pathlib import Path
from typing import Any

import polars as pl

from capture.worktree import commit_info
from tracediff.bisect import share as bs
from tracediff.bisect.bisection import Bisection
from tracediff.bisect.follow import ROW_KEY, row_label
from tracediff.runs import runset as rs


def culprit(
    b: Bisection,
    lo: int,
    hi: int,
    follow: dict[str, Any],
    total: float,
    total_ci: tuple[float, float],
    more: tuple[Path, Path] | None = None,
) -> dict[str, Any]:
    """Culprit commits[hi] (parent commits[lo]) as reported, measured between its step's run
    sets (and the run sets `more` of an undecided share's extra runs, tracediff/bisect/rest.py)."""
    parent, sha = b.commits[lo], b.commits[hi]
    c = b.compare_runs(*pair_runs(b, parent, sha, more), (parent[:12], sha[:12]))
    return about(b, c, lo, hi, measure(b, c, follow, total, total_ci))


def remeasured(
    b: Bisection,
    lo: int,
    hi: int,
    follow: dict[str, Any],
    total: float,
    total_ci: tuple[float, float],
    more: tuple[Path, Path] | None,
) -> dict[str, Any]:
    """Culprit commits[hi]'s numbers again with an undecided share's extra runs `more` (its
    contributors stay those of its step's runs): where the cycle time is followed, from the
    runs' kept means (tracediff/bisect/quick.py; a full comparison a share look had cost 4 s of
    bisect's own time under load)."""
    parent, sha = b.commits[lo], b.commits[hi]
    c = b.quick(*pair_runs(b, parent, sha, more), (parent[:12], sha[:12]))
    return measure(b, c, follow, total, total_ci)


def measure(
    b: Bisection, c: Any, follow: dict[str, Any], total: float, total_ci: tuple[float, float]
) -> dict[str, Any]:
    """A culprit's change, share and their CIs, from comparison c of its parent and itself."""
    qs = b.quantities(c, follow)
    delta = sum(q.delta for q in qs)
    # the sum's CI from the rows' (one row, the cycle time, is the usual case): wider, not exact
    ci = bs.ci_of(qs)
    # over the ends' CI too (tracediff/bisect/share.py: both are estimates)
    share_ci = bs.ratio_ci(ci, total_ci) if total else [math.nan, math.nan]
    return {
        "delta_ms_per_cycle": delta,
        "share": delta / total if total else math.nan,
        "delta_ci95": list(ci),
        "share_ci95": share_ci,
        "p_value": c.p_value,
    }


def about(b: Bisection, c: Any, lo: int, hi: int, m: dict[str, Any]) -> dict[str, Any]:
    """Culprit commits[hi] as reported: its commit, its numbers `m` (`measure`), what moved
    (comparison c of its parent commits[lo] and itself) and where to compare them."""
    parent, sha = b.commits[lo], b.commits[hi]
    att = c.attribution.with_columns(pl.col("delta_ms_per_cycle").abs().alias("_abs"))
    # what moved significantly first (a culprit's host-bound gaps swing more, and mean nothing)
    att = att.with_columns(pl.col("significant").fill_null(False))
    top = att.sort(["significant", "_abs"], descending=[True, True]).head(5)
    info = commit_info(b.repo, sha)
    return {
        "commit": sha,
        "subject": info["subject"],
        "parent": parent,
        "delta_ms_per_cycle": m["delta_ms_per_cycle"],
        "share": m["share"],
        "delta_ci95": m["delta_ci95"],
        "share_ci95": m["share_ci95"],
        "measured_on": "its step's run sets",  # or fresh interleaved runs (bisect/share)
        # whether fresh interleaved runs saw its change again (bisect/share.remeasure); None:
        # not measured again, its step's decision stands
        "confirmed": None,
        "author": info["author"],
        "date": info["date"],
        "files": info["files"],
        "skipped_between": b.commits[lo + 1 : hi],
        "p_value": m["p_value"],
        "top_contributors": [
            {
                "kind": r["kind"],
                "name": r["name"],
                "phase": r.get("phase"),
                "delta_ms_per_cycle": r["delta_ms_per_cycle"],
                "significant": r["significant"],
            }
            for r in top.iter_rows(named=True)
        ],
        "compare_command": "tracediff compare "
        + " ".join(shlex.quote(str(b.folder(x))) for x in (parent, sha)),
    }


def result(
    b: Bisection,
    follow: dict[str, Any],
    total: float,
    culprits: list[dict[str, Any]],
    searches: list[int],
    t0: float,
) -> dict[str, Any]:
    n = b.spec.repeat
    by = tally(b)
    finished = sum(
        k["runs"] + k["share_runs"] + k["confirm_runs"] + k["fresh_runs"] for k in by.values()
    )
    fresh = sum(k["fresh_runs"] for k in by.values())
    failed = sum(k["failed"] for k in by.values())
    confirm = sum(k["confirm_runs"] for k in by.values())
    # runs beyond N at a commit (an end, an undecided step) and an undecided share's runs
    extra = sum(
        max(k["runs"] - n, 0) + k["share_runs"]
        for s, k in by.items()
        if s not in b.state["skipped"]
    )
    uncertain = [e["commit"] for e in b.state["log"] if e.get("by") == "closeness"]
    bound = 2 * n + sum(math.ceil(math.log2(k)) * n for k in searches if k > 1)
    first = first_bad(culprits)
    culprits = sorted(culprits, key=lambda c: -abs(c["delta_ms_per_cycle"]))
    result = {
        "good": b.commits[0],
        "bad": b.commits[-1],
        "commits": len(b.commits) - 1,
        "followed": follow["what"],
        "followed_contributors": [row_label(k) for k in follow["rows"]],
        "followed_rows": [dict(zip(ROW_KEY, k, strict=False)) for k in follow["rows"]],
        **b.state.get("order", {}),  # search_order, search_order_why, suspects
        "total_delta_ms_per_cycle": total,
        "first_bad": first["commit"],
        # first_bad's own `confirmed`: True / False (its change was / was not seen again on
        # fresh interleaved runs; False only when no culprit's was: a best guess), None (not
        # measured again: its step's decision stands)
        "first_bad_confirmed": first["confirmed"],
        "culprits": culprits,
        "skipped": [
            {"commit": s, "subject": commit_info(b.repo, s)["subject"], "problem": p}
            for s, p in b.state["skipped"].items()
        ],
        # commits the search went around because the pool had too few of their runs
        "pool_exhausted": list(b.exhausted),
        "steps": b.state["log"],
        # steps still undecided at --max-runs, decided by which end they were closer to: the
        # culprits that depend on them are a best guess, not a significant finding
        "uncertain_steps": uncertain,
        "captures": {
            "used": finished + failed,
            "finished_runs": finished,
            "failed_runs": failed,
            "extra_runs": extra,
            # fresh interleaved runs that confirmed (or not) a change beside a culprit
            "confirm_runs": confirm,
            # fresh runs of each step's ends, interleaved with the step's commit
            "fresh_runs": fresh,
            "bound": bound,
            "bound_rule": "2N + ceil(log2(commits)) * N per search, plus extra (beyond N at a "
            "commit), failed, confirm and fresh runs (each step's ends, interleaved)",
            "captured_now": b.captured,
            "reused": b.reused,
            "from_pool": sum(b.from_pool.values()),
            # every run in OUTDIR's run sets, by commit (`tally`)
            "by_commit": by,
        },
        # the whole bisection's, across resumes (this call's apart)
        "wall_s": b.wall_s(),
        "wall_s_this_call": round(time.monotonic() - t0, 1),
        **({"resumed_from": b.state["resumed_from"]} if "resumed_from" in b.state else {}),
        "outdir": str(b.outdir),
    }
    b.state["result"] = result
    b.save()
    return result


def first_bad(culprits: list[dict[str, Any]]) -> dict[str, Any]:
    """The bisection's answer among its culprits (in the order found: the first search's first).

    The culprit of the search over the whole range, unless fresh interleaved runs of it and its
    parent did not see its change again (`confirmed` False) while a later culprit's were: then
    the first of those. Culprits of the ranges beside come from more tests, on ends captured at
    other times, so they are named first only over one that did not hold: under load a red
    herring came out "like bad" at 4 runs, the search named it, the real culprit was found
    beside it, and the red herring's fresh runs showed no change (seed 111, session 8). When
    none held, the first search's stays, and `first_bad_confirmed` says it is a guess."""
    held = [c for c in culprits if c.get("confirmed") is not False]
    return held[0] if held else culprits[0]


def pair_runs(
    b: Bisection, a: str, z: str, more: tuple[Path, Path] | None
) -> tuple[list[Any], list[Any]]:
    """The runs of a and z: their own run sets' and the steps' fresh runs of them
    (`Bisection.evidence`) and, where given, those of `more` too."""
    ra, rz = b.evidence(a), b.evidence(z)
    if more is None:
        return ra, rz
    return ra + b.runs_of(more[0]), rz + b.runs_of(more[1])


def tally(b: Bisection) -> dict[str, dict[str, int]]:
    """Every run in OUTDIR's run sets, by commit: finished in its own run set (`runs`: the ends',
    the steps', taken from the pool or captured), finished as an undecided share's extra runs
    (`share_runs`: OUTDIR/share-*/), in confirmations (`confirm_runs`: OUTDIR/confirm-*/), and
    not finished anywhere (`failed`: a commit that does not run, a run that failed or was
    interrupted, also those retried since in the same slot: `failed_attempts`). Counted from the
    run sets' indexes, not from the log: a capture that failed part-way is counted as it ran."""
    full = {s[:12]: s for s in b.commits}
    by: dict[str, dict[str, int]] = {}
    sets = [(b.folder(s), s, "runs") for s in b.commits]
    # fresh runs of a step's ends, captured interleaved with the step's commit (the
    # commit's own runs there are its run set: b.folder)
    sets += [
        (f, full.get(f.name, f.name), "fresh_runs")
        for f in b.outdir.glob("step-*/*")
        if f.parent.name != f"step-{f.name}"
    ]
    for kind in ("confirm", "share"):
        sets += [
            (f, full.get(f.name, f.name), f"{kind}_runs") for f in b.outdir.glob(f"{kind}-*/*")
        ]
    for folder, sha, kind in sets:
        if not (folder / rs.INDEX).is_file():
            continue
        k = by.setdefault(
            sha, {"runs": 0, "share_runs": 0, "confirm_runs": 0, "fresh_runs": 0, "failed": 0}
        )
        done = len(rs.finished_runs(folder))
        k[kind] += done
        runs = rs.read_index(folder)["runs"]
        # a failed run retried in the same slot (a confirmation's run set reused by a later
        # step) is replaced in the index: its earlier attempts are counted on the entry
        k["failed"] += len(runs) - done + sum(int(r.get("failed_attempts") or 0) for r in runs)
    return by
