"""`tracediff bisect`'s ranges beside a culprit: whether the rest of its range holds a further
change, decided step by step so that a lone culprit costs about what the binary search does.

Stage: bisect (step 3 of tracediff/bisect/bisection.py's algorithm; called by tracediff/bisect/search.py
after each culprit). Input: the culprit C (parent P) found in commits[a..z], the range's ends'
followed quantities and the search's steps that sat between their ends; output: the ranges
beside C to search, each with its ends' quantities. Every look is logged as a step.

The rule, in order (each stage only when the one before could not decide):

1. Share. s = the step's change (P -> C) over the range's (a -> z) on the followed quantity, its
   CI the step's 95 % CI over the range's point change (`share_of_range_ci95`: the issue's
   "the step explains < 60 %", with the step's error).
2. Looks beside it, on the runs already captured (no cost): the ranges a..P and C..z, each
   compared across runs. A side is *suspect* when its look moved (significant at 95 %, in the
   regression's direction), or a step of the search on that side differed from both its ends
   (`between`), or s < SHARE_TO_CONTINUE (the issue's rule) where its look's 95 % CI leaves
   room for the 1 - SHARE_TO_CONTINUE that s leaves unexplained (`reach`: a side whose look
   excludes it cannot hold it; confirming such a side cost 8 fresh runs, and a lone culprit's
   share measured at 4-6 runs under load came out below 60 % often: 58 % at a load of 20, its
   CI 7-104 %). A side suspect by s alone is confirmed only once s is still below the line with
   the share's extra runs (rule 3's, up to --max-runs) or none can be had: a lone culprit whose
   s came out low by noise costs 4-8 extra runs, not 2 x 2N confirmation runs (the sweep's
   seed 208 at load 18: 16 of its 42 captures). With two culprits
   the search always probes a commit that carries one change and not the other: the culprit's
   parent when the other culprit is below it (the search's last like-good commit), the culprit
   itself when the other is above (its first like-bad). So a second culprit shows in three
   ways at once: that commit is `between`, its side's look moves, and s is about a half.
3. Nothing suspect and the CI of s reaches below SHARE_TO_CONTINUE: the share is undecided, and
   is treated as an undecided step is: RUNS_PER_EXTRA more runs of P and of C, captured
   interleaved (P C C P ...) into OUTDIR/share-<P12>-<C12>/, then 1-2 again on the step's runs
   with those, up to --max-runs - N more each. They are extra runs (`captures.extra_runs`; by
   commit `share_runs`); the step's own run sets stay as their steps saw them, so a resumed call
   decides every step the same way. Nothing suspect and the CI at or above SHARE_TO_CONTINUE:
   C explains its range, stop. Nothing suspect, the CI of s reaching below SHARE_TO_CONTINUE,
   but each look's 95 % CI leaving room for less than 1 - SHARE_TO_CONTINUE of the range's
   change beside C (`reach`): C explains its range too (what rule 1 looks for, 40 % elsewhere,
   is excluded by the runs already captured; the share's extra runs, up to 2 x (--max-runs - N),
   had been most of a lone culprit's captures beyond the bound under load). Still undecided at
   the cap: stop, logged as such (nothing moved beside it on the looks).
4. A suspect side is confirmed on N fresh runs of its two ends captured interleaved
   (OUTDIR/confirm-<a12>-<z12>/), taken with the earlier runs (2N a side: 4 fresh runs alone
   missed a real half behind one load spike), and searched only when `further` holds. Where
   it does not but the change is in the regression's direction, significant and material
   (`unsure`), the fresh runs go to --max-runs a side and `further` decides on them (a real
   half at a load of 10-15, issue 31's two-culprit seed 401: +5.5 ms of +10 on 10 v 8 runs,
   not precise, and lost).
   `further` is tracediff/bisect/ends.py's protection, not plain significance: the change is in
   the regression's direction, at least MATERIAL of the GOOD -> BAD change, and large against
   its noise (the 95 % CI's end nearest 0 >= half of it) or, for the cycle time, p <= SIDE_LEVEL
   (ALPHA_P split over the 2 * MAX_CULPRITS sides a bisection can test). Why: a side is tested
   on run sets captured at other times, up to 2 * MAX_CULPRITS of them; significance alone
   passes 2.9-5.3 % of unchanged ranges (and drift makes it more: a range of unchanged code was
   found "different"), each a false culprit, where the precision rule passes 0.15-0.35 %
   (bisect/ends' simulation) and a real half (8 ms over 0-6 ms per-process offsets) at 8 runs a
   side passes in 99.9 %. Where a further change was shown before this test (a step on that
   side between its ends, or the share's whole CI below SHARE_TO_CONTINUE: `known`), the test
   only says where it is, and significance at 95 % (with MATERIAL) suffices: under "no change"
   both tests must pass by chance (the earlier one's 2.5-5 % times this one's 5 %: a level split,
   as safe as the precision rule). Without it a real half at a load average of 8 was lost: 8.3 ms
   on 8 runs a side, significant but not precise, beside a step that had differed from both
   ends. The two tests are independent only through the fresh runs: the earlier evidence came
   from the same earlier runs that the 2N-a-side test includes. So with `known` the fresh runs
   alone must also show the change, in its direction and at least MATERIAL of GOOD -> BAD (no
   significance asked of 4 runs: a real half clears it however a load spike falls). Seed 109 of
   session 9 (load 4-5): an unchanged commit came out between its ends at 4 runs (+2.6 ms,
   p 0.029), its side passed at 8 runs a side on those runs' bias (+1.7 ms, p 0.039) while the
   fresh runs alone showed +0.75 ms (p 0.6), and a false second culprit was searched for and
   reported. Without a workload command (a pool) nothing can be captured: its runs
   were captured interleaved in one call, and `further` on the look decides; a confirmation
   whose capture fails is logged with its problem and `further` on the look decides.

Why step by step: confirming both sides whenever the CI of s reached below 60 % (the former
rule) cost 24 fresh runs (the step again on N interleaved runs of P and C, and both sides)
for most lone culprits: 41-45 captures in 13 of 20 seeds against the issue's bound of 20.
A lone culprit now costs the bound plus 0, 4 or 8 runs (the share's), unless a look beside it
moves.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from tracediff.bisect import ends as be
from tracediff.bisect import result as bres
from tracediff.bisect.bisection import (
    MAX_CULPRITS,
    RUNS_PER_EXTRA,
    SHARE_TO_CONTINUE,
    Bisection,
    runs_in,
)
from tracediff.bisect.follow import Q
from tracediff.bisect.step import sign
from tracediff.report.bisect import share_text

SIDE_LEVEL = be.ALPHA_P / (2 * MAX_CULPRITS)
"""The cycle time's p-value route for a side range (rule 4): ALPHA_P over the sides testable."""


def share_of_range(c: dict[str, Any], rd: float) -> tuple[float, float, float]:
    """Rule 1: the culprit's share of its range's point change rd, and that share's CI (from its
    step's CI). A rule's quantity, logged with the step that used it: the culprit's reported
    share and its one CI are `share` and `share_ci95` (tracediff/bisect/share.py), and stderr,
    JSON, table and markdown all show those (issue 31: stderr had shown this CI, 77-188 %, beside
    the result's [53 %, 343 %] for the same culprit)."""
    lo_ci, hi_ci = sorted(x / rd for x in c["delta_ci95"])
    return c["delta_ms_per_cycle"] / rd, lo_ci, hi_ci


def beside(
    b: Bisection,
    c: dict[str, Any],
    span: tuple[int, int],
    lo: int,
    hi: int,
    ends: list[Q],
    splits: list[int],
    follow: dict[str, Any],
    total: float,
    total_ci: tuple[float, float],
) -> list[tuple[int, int, list[Q]]]:
    """Rules 1-4 for culprit c = commits[hi] (parent commits[lo]) found in commits[span]: the
    ranges beside it to search, each as (first, last, its ends' quantities)."""
    start, end = span
    rd = sum(q.delta for q in ends)
    sides = [(a, z) for a, z in ((start, lo), (hi, end)) if z - a >= 1]
    if not rd:
        return []
    parent, sha = b.commits[lo], b.commits[hi]
    more: tuple[Path, Path] | None = None  # the share's extra runs of parent and culprit
    stuck = None  # why no more runs can be had
    while True:
        t0 = time.monotonic()
        s, lo_ci, hi_ci = share_of_range(c, rd)
        extra = {} if more is None else {parent: more[0], sha: more[1]}
        looks = [_look(b, a, z, follow, total, extra) for a, z in sides]
        room = [reach(ci, rd) for _, _, ci in looks]
        # a step between its ends on this side: at or below the parent, or at or above C
        hints = [any(x <= lo if z <= lo else x >= hi for x in splits) for a, z in sides]
        # a side the share alone points at (s below the line, the side's look leaving room),
        # and one its own evidence does (a step there between its ends, its look moved)
        low = [s < SHARE_TO_CONTINUE and r >= 1 - SHARE_TO_CONTINUE for r in room]
        strong = [h or m for h, (m, _, _) in zip(hints, looks, strict=True)]
        suspect = [x or y for x, y in zip(low, strong, strict=True)]
        have = 0 if more is None else min(len(b.runs_of(f)) for f in more)
        grow = min(have + RUNS_PER_EXTRA, b.max_runs - b.spec.repeat)
        can_grow = stuck is None and b.live and grow > have
        decision = _decision(sides, lo_ci, room, low, strong, (grow, have, can_grow), stuck, b.live)
        b.log(
            {
                **b.entry(sha, parent, pool=True),
                "share_runs": [0, 0] if more is None else [len(b.runs_of(f)) for f in more],
                "decision": decision,
                "share_of_range": s,
                "share_of_range_ci95": [lo_ci, hi_ci],
                "beside": [
                    {
                        "first": b.commits[a],
                        "last": b.commits[z],
                        "delta_ms_per_cycle": d,
                        # the most of the range's change its CI leaves room for
                        "reach": r,
                        "moved": m,
                        "between": h,
                        "suspect": u,
                    }
                    for (a, z), (m, d, _), r, h, u in zip(
                        sides, looks, room, hints, suspect, strict=True
                    )
                ],
                "wall_s": round(time.monotonic() - t0, 1),
            }
        )
        b.say(f"  {sha[:12]}: {share_text(c)}: {decision}")
        if not decision.startswith("share undecided: "):
            break
        # interleaved with each other (P C C P ...), apart from the step's run sets: those stay
        # as their steps saw them, so that a resumed call decides every step the same way
        more, problem = b.confirm(parent, sha, grow, kind="share")
        if more is not None:
            b.limits.update({str(f): grow for f in more})
        if problem is not None:
            stuck = "a run failed"
        c.update(bres.remeasured(b, lo, hi, follow, total, total_ci, more))
    found = []
    # evidence of a further change gathered before the side's own test: a step there differed
    # from both its ends, or the share's whole CI is below SHARE_TO_CONTINUE
    known = [h or hi_ci < SHARE_TO_CONTINUE for h in hints]
    for (a, z), u, k in zip(sides, suspect, known, strict=True):
        qs = side(b, a, z, follow, total, k) if u else None
        if qs is not None:
            found.append((a, z, qs))
    return found


def _decision(
    sides: list[tuple[int, int]],
    lo_ci: float,
    room: list[float],
    low: list[bool],
    strong: list[bool],
    runs: tuple[int, int, bool],
    stuck: str | None,
    live: bool,
) -> str:
    """What beside() decides on one pass: test the sides, take the share's extra runs, or the
    culprit explains its range. runs = (grow, have, can_grow): the share's extra runs of parent
    and culprit to take next, taken so far, and whether more can be captured."""
    grow, have, can_grow = runs
    if any(strong) or (any(low) and not can_grow):
        decision = "part of its range: testing beside it"
    elif any(low):
        # the share alone is a point estimate of two noisy ones: its own extra runs (4 a
        # look) before the sides' confirmation (2N fresh runs each)
        decision = (
            f"share undecided: below {100 * SHARE_TO_CONTINUE:.0f} %: parent and culprit "
            f"to {grow} extra runs each"
        )
    elif not sides or lo_ci >= SHARE_TO_CONTINUE:
        decision = "explains its range"
    elif all(r < 1 - SHARE_TO_CONTINUE for r in room):
        # the share's CI leaves room for a further change, the looks beside it do not: the
        # runs already captured exclude what rule 1 looks for (40 % elsewhere), and the
        # share's extra runs (up to 2 x (--max-runs - N)) are not needed
        decision = (
            f"explains its range (the looks beside it exclude "
            f"{100 * (1 - SHARE_TO_CONTINUE):.0f} % of its change there)"
        )
    elif stuck is not None or not live:
        why = stuck or "no workload command to capture more"
        decision = f"share undecided ({why}): nothing moved beside it"
    elif grow > have:
        decision = f"share undecided: parent and culprit to {grow} extra runs each"
    else:
        decision = "share undecided at --max-runs: nothing moved beside it"
    return decision


def _look(
    b: Bisection, a: int, z: int, follow: dict[str, Any], total: float, extra: dict[str, Path]
) -> tuple[bool, float, tuple[float, float]]:
    """Rule 2's look at commits[a..z] on the runs already captured (with the share's extra runs
    of its parent or culprit end, `extra`): moved, its change, and its 95 % CI (summed)."""
    ga, gz = b.commits[a], b.commits[z]
    ra, rz = (b.evidence(x) + (b.runs_of(extra[x]) if x in extra else []) for x in (ga, gz))
    qs = b.quantities(b.quick(ra, rz, (ga[:12], gz[:12])), follow)
    ci = (sum(q.ci[0] for q in qs), sum(q.ci[1] for q in qs))
    return moved(qs, total), sum(q.delta for q in qs), ci


def reach(ci: tuple[float, float], rd: float) -> float:
    """The most of the range's change rd that a look's 95 % CI (summed over the followed
    quantities) leaves room for beside the culprit, in the regression's direction (inf: no CI)."""
    lo, hi = ci
    if not (math.isfinite(lo) and math.isfinite(hi)) or not rd:
        return math.inf
    return max(lo / rd, hi / rd)


def moved(qs: list[Q], total: float) -> bool:
    """Any followed quantity significant (95 %) in the regression's direction: a look's rule.

    Not bisect/share.seen_again, on purpose. On the cycle time they agree (one quantity; the
    engine calls it significant when its CI excludes 0, engine/statistics/verdict.py, and >= 1 µs). With
    several followed rows they differ because their errors cost the opposite: a look that misses
    is final (the side is never captured again and its culprit is lost), so one row that moved
    is enough, where the rows' summed CI (wider than the sum's) would hide it beside rows that
    did not; a false alarm only costs a confirmation, after which the side must still pass
    `further`'s protection. seen_again's false "held" keeps a red herring as first_bad: it
    takes the conservative sum."""
    return any(q.significant and sign(q.delta) == sign(total) for q in qs)


def further(
    c: Any,
    qs: list[Q],
    total: float,
    follow: dict[str, Any],
    known: bool = False,
    fresh: list[Q] | None = None,
) -> bool:
    """Rule 4's protection: a further change in the regression's direction, at least MATERIAL of
    the GOOD -> BAD change, and large against its noise (tracediff/bisect/ends.precise) or, for
    the cycle time, p <= SIDE_LEVEL. `known`: evidence found before this test (a step on that
    side between its ends, or the share's whole CI below SHARE_TO_CONTINUE): significance then
    suffices (the level split over two tests), where the `fresh` runs' quantities alone (when
    given) also hold at least MATERIAL of the change in its direction; for the cycle time, the
    fresh runs alone significant (and material) suffice too."""
    s = sign(total)
    if known and fresh is not None and s * sum(q.delta for q in fresh) < be.MATERIAL * abs(total):
        return False
    if follow["what"] == "cycle time":
        d = c.delta_ms_per_cycle
        ok = sign(d) == s and (bool(c.significant) if known else be.cycle_time_moved(c, SIDE_LEVEL))
        if ok and abs(d) >= be.MATERIAL * abs(total):
            return True
        # known: the fresh runs alone significant (and material) also say where. Two culprits at
        # a load of 15-18 (test_two_culprits_each_half[3], twice): the fresh runs alone showed
        # +13.0 and +13.7 ms of a +13.2 change, while with the earlier runs (the ends' 4,
        # captured minutes before) +5.1 and +6.8, not significant, and the second half was lost.
        # Under no change both this and the earlier evidence must pass by chance: <= 10 % x 5 %.
        return (
            known
            and fresh is not None
            and any(
                q.significant and sign(q.delta) == s and abs(q.delta) >= be.MATERIAL * abs(total)
                for q in fresh
            )
        )
    passing = [
        q
        for q in qs
        if q.significant and sign(q.delta) == s and (known or be.precise(q.delta, *q.ci))
    ]
    return s * sum(q.delta for q in passing) >= be.MATERIAL * abs(total)


def unsure(qs: list[Q], total: float) -> bool:
    """A side's confirmation that `further` did not pass but more runs could: a followed
    quantity significant in the regression's direction, the sum at least MATERIAL of the change."""
    s = sign(total)
    return any(q.significant and sign(q.delta) == s for q in qs) and s * sum(
        q.delta for q in qs
    ) >= be.MATERIAL * abs(total)


def _on_fresh(
    b: Bisection,
    ga: str,
    gz: str,
    fresh: tuple[Path, Path],
    follow: dict[str, Any],
    total: float,
    known: bool,
) -> tuple[bool, list[Q], dict[str, Any]]:
    """Rule 4 on the fresh runs `fresh` of ga and gz with their earlier ones: whether it holds,
    the quantities, and the log entry's fields."""
    # the fresh runs with the earlier ones: twice the runs, drift halved
    fa, fz = b.runs_of(fresh[0]), b.runs_of(fresh[1])
    ra = b.runs_of(b.folder(ga)) + fa
    rz = b.runs_of(b.folder(gz)) + fz
    # the fresh runs alone: what `known` cannot have biased (see `further`); from their run
    # means where the cycle time is followed (bisect/quick.py)
    alone = b.quantities(b.quick(fa, fz, (ga[:12], gz[:12])), follow)
    cf = b.quick(ra, rz, (ga[:12], gz[:12]))
    qs = b.quantities(cf, follow)
    yes = further(cf, qs, total, follow, known, alone)
    return (
        yes,
        qs,
        {
            "decision": "regression (confirmed)" if yes else "no further change (confirmed)",
            "confirm_folder": fresh[0].parent.name,
            "confirm_runs": [len(fa), len(fz)],
            "confirm_on": [len(ra), len(rz)],
            "confirm_p_value": cf.p_value,
            "confirm_delta_ms_per_cycle": sum(q.delta for q in qs),
            "fresh_delta_ms_per_cycle": sum(q.delta for q in alone),
        },
    )


def side(
    b: Bisection, a: int, z: int, follow: dict[str, Any], total: float, known: bool = False
) -> list[Q] | None:
    """Rule 4 for commits[a..z]: its ends' quantities when it holds a further change (`known`:
    see `further`)."""
    t0 = time.monotonic()
    ga, gz = b.commits[a], b.commits[z]
    # the cycle time from kept run means where it is followed (bisect/quick.py)
    cz = b.quick(b.runs_of(b.folder(ga)), b.runs_of(b.folder(gz)), (ga[:12], gz[:12]))
    qs = b.quantities(cz, follow)
    entry: dict[str, Any] = {
        **b.entry(gz, ga, pool=True),
        "p_value": cz.p_value,
        "delta_ms_per_cycle": sum(q.delta for q in qs),
        "known": known,
    }
    fresh, problem = b.confirm(ga, gz)
    if fresh is not None and problem is None:
        b.limits.update({str(f): b.spec.repeat for f in fresh})  # a resume's first look: N
        yes, qs, found = _on_fresh(b, ga, gz, fresh, follow, total, known)
        if not yes and unsure(qs, total) and b.max_runs > b.spec.repeat:
            # in the regression's direction and material, but not precise: --max-runs fresh
            # runs a side before it is called no change (a real half at a load of 10-15 was
            # lost at 4: +5.5 ms of +10, its CI not clear of half of it)
            b.say(f"  {ga[:12]}..{gz[:12]}: not decided: capturing up to {b.max_runs} fresh runs")
            more, problem = b.confirm(ga, gz, b.max_runs)
            if more is not None and problem is None:
                b.limits.update({str(f): b.max_runs for f in more})
                yes, qs, found = _on_fresh(b, ga, gz, more, follow, total, known)
            elif more is not None:  # decided on the first look; what ran is counted
                found["confirm_runs"] = [runs_in(f) for f in more]
        entry.update(found)
        if problem is not None:
            entry.update(confirm_problem=problem)
    else:
        yes = further(cz, qs, total, follow, known)
        entry["decision"] = "regression" if yes else "no further change"
        if problem is not None:  # logged with what ran: its runs are counted (captures)
            entry.update(
                decision=entry["decision"] + " (not confirmed: the capture failed)",
                confirm_problem=problem,
                confirm_folder=fresh[0].parent.name if fresh else None,
                confirm_runs=[runs_in(f) for f in fresh] if fresh else [0, 0],
            )
    entry.update(significant=yes, wall_s=round(time.monotonic() - t0, 1))
    b.log(entry)
    on = (
        f"{entry['confirm_delta_ms_per_cycle']:+.3f} ms/cycle on {entry['confirm_on'][0]} and "
        f"{entry['confirm_on'][1]} runs with the fresh ones, "
        f"{entry['fresh_delta_ms_per_cycle']:+.3f} on the fresh ones alone"
        if "confirm_on" in entry
        else f"{entry['delta_ms_per_cycle']:+.3f} ms/cycle on the runs so far"
    )
    b.say(f"  {ga[:12]}..{gz[:12]}: {entry['decision']} ({on})")
    return qs if yes else None
