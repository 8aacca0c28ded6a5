"""`tracediff bisect`'s ranges beside a culprit: whether the rest of a range holds a further change.

Stage: capture (step 3 of capture/bisect.py's algorithm; called by capture/bisect_search.py
after each culprit). Input: the culprit, its range and the steps that found it; output: the
ranges beside it to search, each with its ends' followed quantities. Every test is logged as a
step in bisect.json.
"""

from __future__ import annotations

import time
from typing import Any

from capture.bisect import SHARE_TO_CONTINUE, Bisection
from capture.bisect_follow import Q
from capture.bisect_step import sign


def partial(c: dict[str, Any], ends: list[Q]) -> bool:
    """Whether the culprit's step may explain only part of its range's change (the CI of its share
    of the range's point change reaches below SHARE_TO_CONTINUE: `rest`'s rule)."""
    rd = sum(q.delta for q in ends)
    return bool(rd) and min(x / rd for x in c["delta_ci95"]) < SHARE_TO_CONTINUE


def rest(
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


def side(
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
    moved = any(q.significant and sign(q.delta) == sign(total) for q in qs)
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
            moved = any(q.significant and sign(q.delta) == sign(total) for q in qs)
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
