"""`tracediff bisect`'s culprit shares: what part of GOOD -> BAD's change a culprit's step is, with
an interval that covers the truth.

Stage: bisect (step 3 of tracediff/bisect/bisection.py; called by tracediff/bisect/search.py). Input: a
culprit (its parent and commit), the followed quantities, the ends' change and its CI; output:
the culprit's `delta_ms_per_cycle`, `share`, `share_ci95` (and `measured_on`), in place.

Two things made the share's CI miss the truth (two culprits each adding half: 0.87 with a CI from
0.68, true 0.5, measured in session 6):

1. Drift. The step's pair (parent, culprit) are run sets captured minutes apart, at other times
   than the ends: on a shared machine a load change between them is a "change" the across-run
   test cannot see (its CI is over the runs of each set, not over when they ran). Where the
   share matters (a culprit beside another: a range beside it held a further change, or it is
   the culprit of a later search), N fresh runs of parent and culprit are captured
   interleaved (A Z Z A ..., OUTDIR/confirm-<parent12>-<culprit12>/, as for a range's
   confirmation) and the step is measured on those alone: drift between capture times then
   moves both sides alike. The ends were captured interleaved already. A pool without a workload
   command cannot capture: its step is kept (its runs were captured in one call).
2. The denominator. The share is the step's change over the ends' change, and both are
   estimates; dividing the step's CI by the ends' point estimate left out the second one's
   error. `share_ci95` is every ratio n / d for n in the step's 95 % CI and d in the ends' 95 %
   CI (`ratio_ci`; both hold at once with probability >= 90 % by Bonferroni, and more in
   practice: the ratio reaches its interval's end only when both do). It is wide at 4 runs a
   side: honest about what 4 runs can tell.

`share_of_range_ci95`, the CI over the range's point change that decides whether to look beside
a culprit (tracediff/bisect/rest.py), is not this interval: it is the issue's rule ("the step
explains < 60 %"), and with the ends' error added a lone culprit's share at 4 runs would always
reach below 60 %.
"""

from __future__ import annotations

import math
import time
from typing import Any

from tracediff.bisect.bisection import Bisection, runs_in
from tracediff.bisect.follow import Q


def ratio_ci(num: tuple[float, float], den: tuple[float, float]) -> list[float]:
    """[low, high] of n / d over n in num and d in den; (-inf, inf) when den reaches 0 or either
    is not finite (no interval of the ratio is supported)."""
    lo_d, hi_d = sorted(den)
    if not all(math.isfinite(x) for x in (*num, lo_d, hi_d)) or lo_d <= 0 <= hi_d:
        return [-math.inf, math.inf]
    corners = [n / d for n in num for d in (lo_d, hi_d)]
    return [min(corners), max(corners)]


def ci_of(qs: list[Q]) -> tuple[float, float]:
    """The summed quantities' CI from their CIs (one quantity, the cycle time, is the usual case;
    for several: wider than the sum's, not exact)."""
    return (sum(q.ci[0] for q in qs), sum(q.ci[1] for q in qs))


def remeasure(
    b: Bisection,
    c: dict[str, Any],
    follow: dict[str, Any],
    total: float,
    total_ci: tuple[float, float],
    n: int | None = None,
) -> None:
    """Measure culprit c's step on n (N) fresh interleaved runs of its parent and itself (point 1
    above) and set its change, share and share CI from them; logged as a step. Nothing changes
    when they cannot be captured (no workload command; a run that fails is logged)."""
    t0 = time.monotonic()
    parent, sha = c["parent"], c["commit"]
    fresh, problem = b.confirm(parent, sha, n)
    if fresh is None:
        return
    if problem is not None:  # what ran is logged (and counted); the step's measure is kept
        b.log(
            _entry(
                b,
                parent,
                sha,
                t0,
                decision="culprit's share: not measured again (a fresh run failed)",
                confirm_problem=problem,
                confirm_folder=fresh[0].parent.name,
                confirm_runs=[runs_in(f) for f in fresh],
            )
        )
        return
    ra, rz = b.runs_of(fresh[0]), b.runs_of(fresh[1])
    cf = b.quick(ra, rz, (parent[:12], sha[:12]))  # the cycle time from run means (bisect/quick)
    qs = b.quantities(cf, follow)
    delta, ci = sum(q.delta for q in qs), ci_of(qs)
    b.log(
        _entry(
            b,
            parent,
            sha,
            t0,
            decision="culprit's share on fresh interleaved runs",
            p_value=cf.p_value,
            delta_ms_per_cycle=delta,
            # (a confirmation of the range parent..culprit made beside an earlier culprit is
            # the same folder, reused: its runs are counted once, by folder)
            confirm_folder=fresh[0].parent.name,
            confirm_runs=[len(ra), len(rz)],
            confirm_on=[len(ra), len(rz)],
            confirm_p_value=cf.p_value,
            confirm_delta_ms_per_cycle=delta,
            step_delta_ms_per_cycle=c["delta_ms_per_cycle"],
        )
    )
    held = seen_again(ci, total)
    b.say(
        f"  {sha[:12]}: {delta:+.3f} ms/cycle on fresh interleaved runs of it and its parent "
        f"({c['delta_ms_per_cycle']:+.3f} between its step's run sets)"
        + ("" if held else ": not seen again (its 95 % CI reaches 0), not confirmed")
    )
    c.update(
        delta_ms_per_cycle=delta,
        delta_ci95=list(ci),
        share=delta / total if total else math.nan,
        share_ci95=ratio_ci(ci, total_ci),
        p_value=cf.p_value,
        measured_on="fresh interleaved runs",
        confirmed=held,
    )


def _entry(b: Bisection, parent: str, sha: str, t0: float, **fields: Any) -> dict[str, Any]:
    """A step log entry of culprit sha's share (against its parent), timed from t0."""
    return {
        **b.entry(sha, parent),
        **fields,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def seen_again(ci: tuple[float, float], total: float) -> bool:
    """Whether a culprit's change on fresh runs is still there: its 95 % CI (summed over the
    followed quantities, wider than the sum's) excludes 0 on the regression's side.

    Not bisect/rest.moved ("any followed quantity significant"), on purpose, though on the cycle
    time the two agree (see there). What is confirmed is the culprit's change as reported (its
    summed delta_ms_per_cycle), and a false "held" is the costly error: it keeps a red herring as
    first_bad over a culprit whose change did hold (bisect/result.first_bad). "Any of k rows"
    would pass an unchanged commit with up to 1 - 0.95^k by chance. The summed CI errs toward
    "not seen again", which costs less: a later culprit that held (a real one) is named first,
    or, when none held, first_bad stays and `first_bad_confirmed` says it is a guess."""
    lo, hi = ci
    return lo > 0 if total > 0 else hi < 0
