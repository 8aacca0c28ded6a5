"""`tracediff bisect`'s search: the ends' check, the binary search, culprits and their shares.

Stage: capture (drives capture/bisect.py's `Bisection`: captures, comparisons, state). Input: a
`BisectSpec`; output: the result dict (the JSON of `tracediff bisect --format json`). The
algorithm and the decision rule are described in capture/bisect.py's docstring.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable
from typing import Any

import polars as pl

from capture import bisect_ends as be
from capture import bisect_order as bo
from capture import bisect_share as bs
from capture.bisect import (
    MAX_CULPRITS,
    ROW_KEY,
    RUNS_PER_EXTRA,
    SHARE_TO_CONTINUE,
    Bisection,
    BisectSpec,
    NothingToBisect,
    Q,
    commit_info,
    row_label,
)
from tracediff import runset as rs


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def decide(vs_good: Q, vs_bad: Q, total: Q) -> str | None:
    """like "bad" / "good" / None (undecided) for one quantity (capture/bisect.py: the rule).
    vs_good: GOOD -> X; vs_bad: X -> BAD; total: GOOD -> BAD."""
    s = _sign(total.delta)
    moved_g = vs_good.significant and _sign(vs_good.delta) == s
    moved_b = vs_bad.significant and _sign(vs_bad.delta) == s
    if moved_g and not moved_b:
        return "bad"
    if moved_b and not moved_g:
        return "good"
    if moved_g and moved_b:
        return "bad" if vs_good.delta / total.delta >= 0.5 else "good"
    return None


def vote(each: list[str | None], ends: list[Q]) -> str | None:
    """Several followed quantities decide by weight, each weighing its GOOD -> BAD |change|: like
    bad (good) when the quantities saying so hold more than half the weight, else undecided. A
    small contributor that came out significant beside the real one (4 runs a side reach the
    permutation test's smallest p by chance for some of a hundred rows) cannot outvote it: on the
    H200 pool a +0.004 ms/cycle gap called a README commit "like bad" over the +0.017 copy that
    said "like good" when any one quantity could decide."""
    weights = [abs(t.delta) if math.isfinite(t.delta) else 0.0 for t in ends]
    total = sum(weights)
    if total <= 0:
        return None
    for side in ("bad", "good"):
        if sum(w for e, w in zip(each, weights, strict=True) if e == side) > total / 2:
            return side
    return None


def moved_share(vs_good: list[Q], ends: list[Q]) -> float:
    """How much of the GOOD -> BAD change X has already moved, over the followed quantities
    weighted as in `vote` (sum of GOOD -> X changes in the regression's direction over the sum
    of |GOOD -> BAD|); nan when nothing moved between the ends."""
    num = sum(_sign(t.delta) * g.delta for g, t in zip(vs_good, ends, strict=True) if t.delta)
    den = sum(abs(t.delta) for t in ends if t.delta)
    return num / den if den else math.nan


def between(vs_good: Q, vs_bad: Q, total: Q) -> bool:
    """X differs significantly from both ends, in the regression's direction: the change is split
    across commits on both sides of X (two culprits at least), not one commit's."""
    s = _sign(total.delta)
    return all(q.significant and _sign(q.delta) == s for q in (vs_good, vs_bad))


def run_bisect(spec: BisectSpec, say: Callable[[str], None]) -> dict[str, Any]:
    """The whole bisection; raises NothingToBisect, BisectInterrupted or TracediffError."""
    t0 = time.monotonic()
    b = Bisection(spec, say)
    with b.hold():
        b.load_state()
        return _run(b, spec, say, t0)


def _run(b: Bisection, spec: BisectSpec, say: Callable[[str], None], t0: float) -> dict[str, Any]:
    good, bad = b.commits[0], b.commits[-1]
    n_commits = len(b.commits) - 1
    say(
        f"{n_commits} first-parent commit{'s' if n_commits != 1 else ''} in {good[:12]}..{bad[:12]}"
    )
    n = spec.repeat
    exhausted = False
    # ends not told apart at N runs: more runs a side, up to the cap; each look at its own level
    # (capture/bisect_ends.py: the p-value levels sum to 1 %)
    levels = be.look_levels(spec.repeat, b.max_runs, RUNS_PER_EXTRA)
    look = 0
    while True:
        got = b.capture_ends(n)
        c0 = b.compare(good, bad)
        seen = b.follow(c0, levels[min(look, len(levels) - 1)])
        follow = seen.follow
        exhausted = min(got) < n
        if follow is not None or n >= b.max_runs or exhausted:
            break
        n, look = min(n + RUNS_PER_EXTRA, b.max_runs), look + 1
        say(f"the ends are not told apart at {n - RUNS_PER_EXTRA} runs a side: capturing up to {n}")
    b.state["follow"] = follow
    b.state["log"] = []
    b.log(
        {
            "step": 0,
            "commit": bad,
            "against": good,
            "runs": [b.n_runs(good), b.n_runs(bad)],
            "from_pool": [b.from_pool.get(good, 0), b.from_pool.get(bad, 0)],
            "decision": "regression" if follow else "nothing to bisect",
            "p_value": c0.p_value,
            "delta_ms_per_cycle": c0.delta_ms_per_cycle,
            "significant": bool(c0.significant),
            "look": look + 1,
            "level": seen.level,
            # significant rows the rule did not follow, with why (capture/bisect_ends.py)
            "not_followed": seen.left_out,
            "wall_s": round(time.monotonic() - t0, 1),
        }
    )
    if follow is None:
        p = "n/a" if c0.p_value is None else f"{c0.p_value:.3f}"
        small = "".join(
            f"; {r['name']} {r['delta_ms_per_cycle']:+.3f} ms/cycle is significant but {r['why']}"
            for r in seen.left_out[:2]
        )
        raise NothingToBisect(
            f"nothing to bisect: {good[:12]} and {bad[:12]} are not told apart across runs "
            f"(cycle time {c0.delta_ms_per_cycle:+.3f} ms/cycle, p = {p} at {got[0]} and {got[1]} "
            f"runs, level {seen.level:.2g}"
            + (", too small against its run-to-run noise" if c0.significant else "")
            + small
            + (f"; no contributor matching {spec.contributor!r} moved" if spec.contributor else "")
            + (f"; the pool has no more runs of them ({got[0]} and {got[1]})" if exhausted else "")
            + ")",
            (
                f"capture more runs (--repeat {2 * spec.repeat}"
                + (" into the pool" if exhausted else "")
                + ") or check that BAD really is slower"
            ),
        )
    totals = b.quantities(c0, follow)
    total, total_ci = sum(q.delta for q in totals), bs.ci_of(totals)
    say(
        f"following {follow['what']}"
        + (f" ({', '.join(map(row_label, follow['rows']))})" if follow["rows"] else "")
        + f": {total:+.3f} ms/cycle from good to bad"
    )
    order = bo.plan(b, c0, spec.suspects)
    b.state["order"] = order.json()
    b.state["log"][0]["search_order"] = order.mode
    b.save()
    say(f"search order: {order.mode} ({order.why})")
    culprits: list[dict[str, Any]] = []
    searches: list[int] = []
    todo = [(0, n_commits, totals)]
    while todo and len(culprits) < MAX_CULPRITS:
        start, end, ends = todo.pop(0)
        searches.append(end - start)
        # the suspects order the search over the whole range; ranges beside a culprit: binary
        lo, hi, splits = _search(b, start, end, ends, order if len(searches) == 1 else None)
        c = _culprit(b, lo, hi, follow, total, total_ci)
        c["search"] = len(searches)  # 1: the whole range; later: a range left beside a culprit
        partial = _partial(c, ends)
        if len(searches) > 1 or partial:
            # its share matters (beside another culprit): measured free of drift
            # (capture/bisect_share.py)
            bs.remeasure(b, c, follow, total, total_ci)
        culprits.append(c)
        # the rest is looked at (and confirmed on fresh runs) when the step's first measure says
        # "part of it", whatever the fresh one says (0.67 of an under-measured total, true 0.5)
        for a, z, hinted in _rest(b, c, start, lo, hi, end, ends, splits, partial):
            qs = _side(b, a, z, hinted, follow, total)
            if qs is not None:
                todo.append((a, z, qs))
    return _result(b, follow, total, culprits, searches, t0)


def _partial(c: dict[str, Any], ends: list[Q]) -> bool:
    """Whether the culprit's step may explain only part of its range's change (the CI of its share
    of the range's point change reaches below SHARE_TO_CONTINUE: `_rest`'s rule)."""
    rd = sum(q.delta for q in ends)
    return bool(rd) and min(x / rd for x in c["delta_ci95"]) < SHARE_TO_CONTINUE


def _rest(
    b: Bisection,
    c: dict[str, Any],
    start: int,
    lo: int,
    hi: int,
    end: int,
    ends: list[Q],
    splits: list[int],
    partial: bool = False,
) -> list[tuple[int, int, bool]]:
    """The ranges beside a culprit that may hold a further change (capture/bisect.py, step 3):
    (first, last, hinted) for each; hinted (confirmed on fresh runs whatever the first test says)
    when the share's point estimate is below SHARE_TO_CONTINUE, or a step of this search found a
    commit on that side between the ends (significantly different from both: the change is split
    around it).

    The culprit explains only part of its range's change when the CI of its share (its step's
    change over the range's; the CI of its step's comparison) reaches below SHARE_TO_CONTINUE:
    the point estimate alone is what stopped too early (0.76 measured for a true half) and went
    on too often (0.49 for a lone culprit: drift between run sets captured minutes apart).
    `partial`: the step's first measure said so (before its share was measured again on fresh
    interleaved runs: capture/bisect_share.py); then both sides are hinted."""
    rd = sum(q.delta for q in ends)
    if not rd:
        return []
    lo_ci, hi_ci = sorted(x / rd for x in c["delta_ci95"])
    c["share_of_range_ci95"] = [lo_ci, hi_ci]
    if not (partial or lo_ci < SHARE_TO_CONTINUE):
        return []
    share = c["delta_ms_per_cycle"] / rd
    b.say(
        f"{c['commit'][:12]} explains {100 * share:.0f} % of its range's change "
        f"(95 % CI from {100 * lo_ci:.0f} %): testing the rest"
    )
    # the rule: below 60 %, always look further; and when the step's first measure said
    # "part of it": its run sets' drift may sit in the range's ends too (a two-culprit seed: the
    # step +12.6 ms, fresh interleaved 8.0 of the ends' 12.0 (true 8 of 16), and the culprit..BAD
    # range +0.5 ms on the runs already captured, so not confirmed: the second half missed)
    low = share < SHARE_TO_CONTINUE or partial
    sides = [
        (start, lo, low or any(x < hi for x in splits)),
        (hi, end, low or any(x >= hi for x in splits)),
    ]
    return [(a, z, h) for a, z, h in sides if z - a >= 1]


def _side(
    b: Bisection, a: int, z: int, hinted: bool, follow: dict[str, Any], total: float
) -> list[Q] | None:
    """Whether commits[a..z] holds a further change: its ends' quantities when it does.

    First on the runs already captured (no cost). Those run sets were captured minutes apart, so
    a "change" there may be drift (a range of unchanged code was once found different that way);
    a positive, or a hinted range, is confirmed on N fresh runs of both ends captured interleaved
    together with the earlier ones (2N a side), and only a confirmed range is searched. A pool without a workload
    command cannot capture: its runs were captured interleaved in one call, and the first test
    decides."""
    t0 = time.monotonic()
    ga, gz = b.commits[a], b.commits[z]
    cz = b.compare(ga, gz)
    qs = b.quantities(cz, follow)
    moved = any(q.significant and _sign(q.delta) == _sign(total) for q in qs)
    entry: dict[str, Any] = {
        "step": len(b.state["log"]),
        "commit": gz,
        "against": ga,
        "runs": [b.n_runs(ga), b.n_runs(gz)],
        "decision": "regression" if moved else "no further change",
        "p_value": cz.p_value,
        "delta_ms_per_cycle": sum(q.delta for q in qs),
        "significant": moved,
        "hinted": hinted,
    }
    if moved or hinted:  # confirmed: a positive may be drift, a negative may be a load spike
        fresh = b.confirm(ga, gz)
        if fresh is not None:
            # the fresh runs with the earlier ones: twice the runs (one load spike in 4 runs
            # hid a real 8 ms half of the change from 4 fresh runs alone), drift halved
            ra = b.runs_of(b.folder(ga)) + b.runs_of(fresh[0])
            rz = b.runs_of(b.folder(gz)) + b.runs_of(fresh[1])
            cf = b.compare_runs(ra, rz, (ga[:12], gz[:12]))
            qs = b.quantities(cf, follow)
            moved = any(q.significant and _sign(q.delta) == _sign(total) for q in qs)
            entry.update(
                decision="regression (confirmed)" if moved else "no further change (confirmed)",
                confirm_runs=[len(b.runs_of(f)) for f in fresh],
                confirm_on=[len(ra), len(rz)],
                confirm_p_value=cf.p_value,
                confirm_delta_ms_per_cycle=sum(q.delta for q in qs),
                significant=moved,
            )
    entry["wall_s"] = round(time.monotonic() - t0, 1)
    b.log(entry)
    b.say(
        f"  {ga[:12]}..{gz[:12]}: {entry['decision']} "
        f"({entry['delta_ms_per_cycle']:+.3f} ms/cycle on the runs so far)"
    )
    return qs if moved else None


def _search(
    b: Bisection, lo: int, hi: int, ends: list[Q], order: bo.Order | None = None
) -> tuple[int, int, list[int]]:
    """Binary search in commits[lo..hi] (lo like good, hi like bad), or ordered by the top
    suspect within the same bound (capture/bisect_order.py): the last like-good and the first
    like-bad index, adjacent but for skipped commits between them; and the steps whose commit
    sat between the ends (significantly different from both)."""
    splits: list[int] = []
    suspect = None if order is None else order.suspect
    budget = bo.steps_for(hi - lo)  # decided steps the binary search's bound allows
    while True:
        # a commit skipped by an earlier call is tried (and logged as skipped) without a capture
        cand = [i for i in range(lo + 1, hi) if b.commits[i] not in b.skipped_now]
        if not cand:
            return lo, hi, splits
        x, how = bo.choose(cand, lo, hi, budget, suspect)
        left = math.ceil(math.log2(len(cand) + 1)) if suspect is None else max(budget, 1)
        info = commit_info(b.repo, b.commits[x])
        why = {"suspect": "the top suspect", "toward suspect": "toward the top suspect"}
        if how == "suspect" and x != suspect:
            why["suspect"] = "the top suspect's parent"
        b.say(
            f"step {len(b.state['log'])}: {b.commits[x][:12]} {info['subject']!r} ("
            + (f"{why[how]}; " if how in why else "")
            + f"at most {left} step{'s' if left != 1 else ''} left here)"
        )
        d, split = _step(b, lo, x, hi, ends)
        if d is not None:
            budget -= 1
        if suspect is not None and b.state["log"][-1]["commit"] == b.commits[x]:
            b.state["log"][-1]["chosen_by"] = how
            b.save()
        if split:
            splits.append(x)
        if d == "bad":
            hi = x
        elif d == "good":
            lo = x


def _step(b: Bisection, lo: int, x: int, hi: int, ends: list[Q]) -> tuple[str | None, bool]:
    """Capture at commits[x] (or take its runs from the pool) until decided or at the cap;
    None: skipped (does not run) or undecided with the pool exhausted. True: X differs from
    both ends (`between`)."""
    t0 = time.monotonic()
    sha, n = b.commits[x], b.spec.repeat
    while True:
        status = b.runs_at(sha, n)
        runs = b.n_runs(sha)
        if status == "skipped" or (status == "exhausted" and runs < 2):
            _not_decided(b, sha, status, runs, t0)
            return None, False
        cg = b.compare(b.commits[lo], sha)
        cb = b.compare(sha, b.commits[hi])
        qg, qb = b.quantities(cg, _follow_of(b)), b.quantities(cb, _follow_of(b))
        each = [decide(g, z, t) for g, z, t in zip(qg, qb, ends, strict=True)]
        split = any(between(g, z, t) for g, z, t in zip(qg, qb, ends, strict=True))
        d = vote(each, ends)
        frac = moved_share(qg, ends)
        by = "test"
        if d is None and status == "exhausted":
            _not_decided(b, sha, status, runs, t0, cg.p_value, cb.p_value)
            return None, False
        if d is None and runs >= b.max_runs:
            d, by = ("bad" if frac >= 0.5 else "good"), "closeness"
            b.say(f"  {sha[:12]}: undecided at {runs} runs: like {d} by closeness only")
        if d is not None:
            b.log(
                {
                    "step": len(b.state["log"]),
                    "commit": sha,
                    "runs": runs,
                    "from_pool": b.from_pool.get(sha, 0),
                    "decision": f"like {d}",
                    "by": by,
                    "p_value_vs_good": cg.p_value,
                    "p_value_vs_bad": cb.p_value,
                    "ci95_vs_good": [list(q.ci) for q in qg],
                    "fraction_of_change": frac,
                    "between": split,
                    "wall_s": round(time.monotonic() - t0, 1),
                }
            )
            b.say(
                f"  {sha[:12]}: like {d} ({runs} runs, {100 * frac:.0f} % of the change"
                + (", different from both ends" if split else "")
                + ")"
            )
            return d, split
        n = min(runs + RUNS_PER_EXTRA, b.max_runs)
        b.say(f"  {sha[:12]}: undecided at {runs} runs: capturing up to {n}")


def _not_decided(
    b: Bisection,
    sha: str,
    status: str,
    runs: int,
    t0: float,
    p_good: float | None = None,
    p_bad: float | None = None,
) -> None:
    """Log a commit the search goes around (as `git bisect skip`): it does not run, or the pool
    has too few of its runs to decide (and no workload command was given to capture more)."""
    b.skipped_now.add(sha)
    entry: dict[str, Any] = {"step": len(b.state["log"]), "commit": sha, "runs": runs}
    if status == "skipped":
        entry.update(decision="skipped", problem=b.state["skipped"][sha])
    else:
        if sha not in b.exhausted:
            b.exhausted.append(sha)
        entry.update(
            decision="undecided: pool exhausted",
            from_pool=b.from_pool.get(sha, 0),
            p_value_vs_good=p_good,
            p_value_vs_bad=p_bad,
        )
        b.say(
            f"  {sha[:12]}: undecided: pool exhausted ({runs} run{'s' if runs != 1 else ''} "
            "in the pool, no workload command to capture more)"
        )
    entry["wall_s"] = round(time.monotonic() - t0, 1)
    b.log(entry)


def _follow_of(b: Bisection) -> dict[str, Any]:
    follow: dict[str, Any] = b.state["follow"]
    return follow


def _culprit(
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


def _result(
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
