"""`tracediff bisect`'s binary search: one range, commit by commit, to its culprit.

Stage: bisect (step 2 of tracediff/bisect/bisection.py's algorithm; called by tracediff/bisect/search.py).
Input: a `Bisection`, a range commits[lo..hi] (lo like good, hi like bad) and its ends' followed
quantities; output: the last like-good and first like-bad index, and the steps whose commit sat
between the ends. Each step is logged in bisect.json. The per-commit rule (`decide`, `vote`) is
described in tracediff/bisect/bisection.py's docstring.
"""

from __future__ import annotations

import math
import time
from typing import Any

from capture.worktree import commit_info
from tracediff.bisect import order as bo
from tracediff.bisect.bisection import RUNS_PER_EXTRA, Bisection, runs_in
from tracediff.bisect.follow import Q


def sign(x: float) -> int:
    return (x > 0) - (x < 0)


def decide(vs_good: Q, vs_bad: Q, total: Q) -> str | None:
    """like "bad" / "good" / None (undecided) for one quantity (tracediff/bisect/bisection.py: the rule).
    vs_good: GOOD -> X; vs_bad: X -> BAD; total: GOOD -> BAD."""
    s = sign(total.delta)
    moved_g = vs_good.significant and sign(vs_good.delta) == s
    moved_b = vs_bad.significant and sign(vs_bad.delta) == s
    if moved_g and not moved_b:
        return "bad"
    if moved_b and not moved_g:
        return "good"
    if moved_g and moved_b:
        # between the ends: like bad when it moved at least half the change, unless its share's
        # CI straddles that line (a near-tie: more runs first; issue 31's red herring came out
        # "like good" at 47 % against the 50 % line as a plain decision)
        lo, hi = share_ci(vs_good, total)
        if lo < LIKE_BAD_LINE <= hi:
            return None
        return "bad" if vs_good.delta / total.delta >= LIKE_BAD_LINE else "good"
    return None


LIKE_BAD_LINE = 0.5
"""A commit between the ends is like bad when it moved at least this part of the change."""


def share_ci(vs_good: Q, total: Q) -> tuple[float, float]:
    """The 95 % CI of the part of GOOD -> BAD's change that GOOD -> X moved (over the ends' point
    change): (-inf, inf) where the step's CI is not finite."""
    lo, hi = sorted(x / total.delta for x in vs_good.ci) if total.delta else (math.nan, math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return -math.inf, math.inf
    return lo, hi


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
    num = sum(sign(t.delta) * g.delta for g, t in zip(vs_good, ends, strict=True) if t.delta)
    den = sum(abs(t.delta) for t in ends if t.delta)
    return num / den if den else math.nan


def between(vs_good: Q, vs_bad: Q, total: Q) -> bool:
    """X differs significantly from both ends, in the regression's direction: the change is split
    across commits on both sides of X (two culprits at least), not one commit's."""
    s = sign(total.delta)
    return all(q.significant and sign(q.delta) == s for q in (vs_good, vs_bad))


def search(
    b: Bisection, lo: int, hi: int, ends: list[Q], order: bo.Order | None = None
) -> tuple[int, int, list[int]]:
    """Binary search in commits[lo..hi] (lo like good, hi like bad), or ordered by the top
    suspect within the same bound (tracediff/bisect/order.py): the last like-good and the first
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
        d, split = step(b, lo, x, hi, ends)
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


def step(b: Bisection, lo: int, x: int, hi: int, ends: list[Q]) -> tuple[str | None, bool]:
    """Capture at commits[x], interleaved with fresh runs of commits[lo] and commits[hi] (or
    take its runs from the pool) until decided or at the cap;
    None: skipped (does not run) or undecided with no more runs to be had. True: X differs from
    both ends (`between`)."""
    t0 = time.monotonic()
    sha, n = b.commits[x], b.spec.repeat
    while True:
        status = b.runs_at(sha, n, against=(b.commits[lo], b.commits[hi]))
        runs = b.n_runs(sha)
        if status == "skipped" or (status in ("exhausted", "short") and runs < 2):
            not_decided(b, sha, status, runs, t0)
            return None, False
        # each end on all its runs so far: the fresh ones captured interleaved with X's, and
        # the earlier ones (bisection.fresh_count: a quarter as many fresh runs of each as X's)
        lo_sha, hi_sha = b.commits[lo], b.commits[hi]
        fresh = [b.fresh(sha, e) for e in (lo_sha, hi_sha)]
        xr, lr, hr = b.runs_of(b.folder(sha)), b.evidence(lo_sha), b.evidence(hi_sha)
        b.learn(xr, lr[0])  # X's run means (the ends' are kept): the comparisons from means
        cg = b.quick(lr, xr, (lo_sha[:12], sha[:12]))
        cb = b.quick(xr, hr, (sha[:12], hi_sha[:12]))
        qg, qb = b.quantities(cg, follow_of(b)), b.quantities(cb, follow_of(b))
        each = [decide(g, z, t) for g, z, t in zip(qg, qb, ends, strict=True)]
        split = any(between(g, z, t) for g, z, t in zip(qg, qb, ends, strict=True))
        d = vote(each, ends)
        frac = moved_share(qg, ends)
        by = "test"
        if d is None and status in ("exhausted", "short"):
            not_decided(b, sha, status, runs, t0, cg.p_value, cb.p_value)
            return None, False
        if d is None and runs >= b.max_runs:
            d, by = ("bad" if frac >= LIKE_BAD_LINE else "good"), "closeness"
            b.say(
                f"  {sha[:12]}: undecided at {runs} runs: like {d} by closeness only "
                f"({100 * frac:.0f} % of the change, {100 * abs(frac - LIKE_BAD_LINE):.0f} points "
                f"from the {100 * LIKE_BAD_LINE:.0f} % line{_ci_text(qg, ends)})"
            )
        if d is not None:
            b.log(
                {
                    **b.entry(sha, pool=True),
                    "decision": f"like {d}",
                    "by": by,
                    "p_value_vs_good": cg.p_value,
                    "p_value_vs_bad": cb.p_value,
                    "ci95_vs_good": [list(q.ci) for q in qg],
                    "fraction_of_change": frac,
                    # fresh runs of each end, interleaved with X's, and all the runs of each
                    # end that its test used (fresh and earlier)
                    "fresh_good_runs": 0 if fresh[0] is None else runs_in(fresh[0]),
                    "fresh_bad_runs": 0 if fresh[1] is None else runs_in(fresh[1]),
                    "end_runs": [len(lr), len(hr)],
                    # how far from the like-bad line, and (one quantity) its CI
                    "margin": frac - LIKE_BAD_LINE,
                    "fraction_ci95": list(share_ci(qg[0], ends[0])) if len(qg) == 1 else None,
                    "between": split,
                    **({"problem": b.short[sha]} if status == "short" else {}),
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


def _ci_text(qg: list[Q], ends: list[Q]) -> str:
    if len(qg) != 1:
        return ""
    lo, hi = share_ci(qg[0], ends[0])
    return f", 95 % CI {100 * lo:.0f}-{100 * hi:.0f} %" if math.isfinite(lo) else ""


def not_decided(
    b: Bisection,
    sha: str,
    status: str,
    runs: int,
    t0: float,
    p_good: float | None = None,
    p_bad: float | None = None,
) -> None:
    """Log a commit the search goes around (as `git bisect skip`): it does not run, a run failed
    after others had finished and those do not decide it, or the pool has too few of its runs to
    decide (and no workload command was given to capture more)."""
    b.skipped_now.add(sha)
    entry = b.entry(sha)
    if status == "skipped":
        entry.update(decision="skipped", problem=b.state["skipped"][sha])
    elif status == "short":
        entry.update(decision="undecided: a run failed", problem=b.short[sha])
        entry.update(p_value_vs_good=p_good, p_value_vs_bad=p_bad)
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


def follow_of(b: Bisection) -> dict[str, Any]:
    """What this bisection follows (set by the ends' step)."""
    follow: dict[str, Any] = b.state["follow"]
    return follow
