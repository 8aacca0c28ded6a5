"""`tracediff bisect`'s driver: the ends' check, then the searches, culprit by culprit.

Stage: bisect (drives tracediff/bisect/bisection.py's `Bisection`: captures, comparisons, state). Input: a
`BisectSpec`; output: the result dict (the JSON of `tracediff bisect --format json`). The
algorithm and the decision rule are described in tracediff/bisect/bisection.py's docstring; the stages are
tracediff/bisect/ends.py (what moved), bisect/step.py (the binary search), bisect/share.py (a
culprit's share), bisect/rest.py (the ranges beside it) and bisect/result.py (the result).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from tracediff.bisect import ends as be
from tracediff.bisect import order as bo
from tracediff.bisect import rest as br
from tracediff.bisect import result as bres
from tracediff.bisect import share as bs
from tracediff.bisect import step as bst
from tracediff.bisect.bisection import (
    MAX_CULPRITS,
    RUNS_PER_EXTRA,
    Bisection,
    BisectSpec,
    NothingToBisect,
)
from tracediff.bisect.follow import row_label


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
    # (tracediff/bisect/ends.py: the p-value levels sum to 1 %)
    levels = be.look_levels(spec.repeat, b.max_runs, RUNS_PER_EXTRA)
    # a resumed call starts at the look its ends had reached (their runs), so that it logs the
    # same look as the first call did
    have = min(b.n_runs(good), b.n_runs(bad), b.max_runs)
    look = min(math.ceil(max(have - n, 0) / RUNS_PER_EXTRA), len(levels) - 1)
    n = min(n + look * RUNS_PER_EXTRA, b.max_runs)
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
            **b.entry(bad, good, pool=True),  # step 0: the log was just emptied
            "decision": "regression" if follow else "nothing to bisect",
            "p_value": c0.p_value,
            "delta_ms_per_cycle": c0.delta_ms_per_cycle,
            "significant": bool(c0.significant),
            "look": look + 1,
            "level": seen.level,
            # significant rows the rule did not follow, with why (tracediff/bisect/ends.py)
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
        lo, hi, splits = bst.search(b, start, end, ends, order if len(searches) == 1 else None)
        c = bres.culprit(b, lo, hi, follow, total, total_ci)
        c["search"] = len(searches)  # 1: the whole range; later: a range left beside a culprit
        culprits.append(c)
        found = br.beside(b, c, (start, end), lo, hi, ends, splits, follow, total, total_ci)
        if len(searches) > 1 or found:
            # its share matters (beside another culprit): measured free of drift
            # (tracediff/bisect/share.py)
            bs.remeasure(b, c, follow, total, total_ci)
        todo.extend(found)
    return bres.result(b, follow, total, culprits, searches, t0)
