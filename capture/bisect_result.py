"""`tracediff bisect`'s result: each culprit as reported, and the whole result dict.

Stage: capture (the end of capture/bisect.py's algorithm; called by capture/bisect_search.py).
Input: a `Bisection` after its searches; output: the result dict (the JSON of `tracediff bisect
--format json`, rendered by tracediff/report/bisect.py), also kept in bisect.json.
"""

from __future__ import annotations

import math
import shlex
import time
from typing import Any

import polars as pl

from capture import bisect_share as bs
from capture.bisect import Bisection, commit_info
from capture.bisect_follow import ROW_KEY, row_label
from tracediff import runset as rs


def culprit(
    b: Bisection,
    lo: int,
    hi: int,
    follow: dict[str, Any],
    total: float,
    total_ci: tuple[float, float],
) -> dict[str, Any]:
    parent, sha = b.commits[lo], b.commits[hi]
    c = b.compare(parent, sha)
    qs = b.quantities(c, follow)
    delta = sum(q.delta for q in qs)
    # the sum's CI from the rows' (one row, the cycle time, is the usual case): wider, not exact
    ci = bs.ci_of(qs)
    # over the ends' CI too (capture/bisect_share.py: both are estimates)
    share_ci = bs.ratio_ci(ci, total_ci) if total else [math.nan, math.nan]
    att = c.attribution.with_columns(pl.col("delta_ms_per_cycle").abs().alias("_abs"))
    # what moved significantly first (a culprit's host-bound gaps swing more, and mean nothing)
    att = att.with_columns(pl.col("significant").fill_null(False))
    top = att.sort(["significant", "_abs"], descending=[True, True]).head(5)
    info = commit_info(b.repo, sha)
    return {
        "commit": sha,
        "subject": info["subject"],
        "parent": parent,
        "delta_ms_per_cycle": delta,
        "share": delta / total if total else math.nan,
        "delta_ci95": list(ci),
        "share_ci95": share_ci,
        "measured_on": "its step's run sets",  # or fresh interleaved runs (bisect_share)
        "author": info["author"],
        "date": info["date"],
        "files": info["files"],
        "skipped_between": b.commits[lo + 1 : hi],
        "p_value": c.p_value,
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
    touched = {e["commit"] for e in b.state["log"]} | {b.commits[0]}
    used = sum(b.n_runs(s) for s in touched if s not in b.state["skipped"])
    confirm = sum(
        len(rs.finished_runs(f)) for f in b.outdir.glob("confirm-*/*") if (f / rs.INDEX).is_file()
    )
    used += confirm
    failed = 0
    for s in b.state["skipped"]:
        if (b.folder(s) / rs.INDEX).is_file():
            failed += sum(1 for r in rs.read_index(b.folder(s))["runs"] if r["status"] != "ok")
    ends = b.state["log"][0]["runs"]
    extra = sum(max(r - n, 0) for r in ends) + sum(
        e["runs"] - n for e in b.state["log"] if e.get("decision", "").startswith("like ")
    )
    uncertain = [e["commit"] for e in b.state["log"] if e.get("by") == "closeness"]
    bound = 2 * n + sum(math.ceil(math.log2(k)) * n for k in searches if k > 1)
    # first_bad: the culprit of the search over the whole range (the bisection's answer);
    # culprits of the remaining ranges are listed with their shares. Those come from more
    # tests at 5 % each, on ends captured at other times: not the one to name first.
    first = culprits[0]
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
            "used": used + failed,
            "finished_runs": used,
            "failed_runs": failed,
            "extra_runs": extra,
            # fresh interleaved runs that confirmed (or not) a change beside a culprit
            "confirm_runs": confirm,
            "bound": bound,
            "bound_rule": "2N + ceil(log2(commits)) * N per search, plus extra, failed and "
            "confirm runs",
            "captured_now": b.captured,
            "reused": b.reused,
            "from_pool": sum(b.from_pool.values()),
        },
        "wall_s": round(time.monotonic() - t0, 1),
        "outdir": str(b.outdir),
    }
    b.state["result"] = result
    b.save()
    return result
