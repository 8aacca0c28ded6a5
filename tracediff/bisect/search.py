"""`tracediff bisect`'s driver: the ends' check, then the searches, culprit by culprit.

Stage: bisect (drives tracediff/bisect/bisection.py's `Bisection`: captures, comparisons, state). Input: a
`BisectSpec`; output: the result dict (the JSON of `tracediff bisect --format json`). The
algorithm and the decision rule are described in tracediff/bisect/bisection.py's docstring; the stages are
tracediff/bisect/ends.py (what moved), bisect/step.py (the binary search), bisect/share.py (a
culprit's share), bisect/rest.py (the ranges beside it) and bisect/result.py (the result).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tracediff.bisect import ends as be
from tracediff.bisect import order as bo
from tracediff.bisect import quick as bq
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
    bq.one_blas_thread()  # bisect's own statistics beside its captures (bisect/quick.py)
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
    c0, follow = _ends(b, spec, say, t0)
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
        if len(searches) == 1 and hi == n_commits:
            bad_itself(b, c, follow, total, total_ci)  # NothingToBisect when not seen again
        culprits.append(c)
        found = br.beside(b, c, (start, end), lo, hi, ends, splits, follow, total, total_ci)
        if (len(searches) > 1 or found) and c["confirmed"] is None:
            # its share matters (beside another culprit): measured free of drift
            # (tracediff/bisect/share.py)
            bs.remeasure(b, c, follow, total, total_ci)
        todo.extend(found)
    return bres.result(b, follow, total, culprits, searches, t0)


def bad_itself(
    b: Bisection,
    c: dict[str, Any],
    follow: dict[str, Any],
    total: float,
    total_ci: tuple[float, float],
) -> None:
    """BAD as the whole range's culprit (every step came out like good): its change is measured
    again on N fresh runs of its parent and itself captured interleaved (bisect/share.remeasure),
    then on --max-runs of them if not seen, before it is named. Not seen again on either:
    NothingToBisect, "not decided". Why: when the ends' test calls a change that is not there
    (its level, 1 in 26 equal-commit seeds under load: seed 300 at 8 runs a side), no commit
    between them moves, every step comes out like good and BAD was named; its fresh runs
    against its parent are a test the ends' runs cannot have biased. A real culprit at BAD
    shows again on them; one lost to a load spike is "not decided", never another commit."""
    bs.remeasure(b, c, follow, total, total_ci)
    if c["confirmed"] is False and b.max_runs > b.spec.repeat:
        b.say(f"  {c['commit'][:12]}: capturing it and its parent to {b.max_runs} fresh runs")
        bs.remeasure(b, c, follow, total, total_ci, b.max_runs)
    if c["confirmed"] is not False:
        return
    lo, hi = c["delta_ci95"]
    err = NothingToBisect(
        f"not decided: good {b.commits[0][:12]} and bad {c['commit'][:12]} differed "
        f"({total:+.3f} ms/cycle) but no commit between them did (every step came out like "
        f"good), and bad against its parent {c['parent'][:12]} shows "
        f"{c['delta_ms_per_cycle']:+.3f} ms/cycle (95 % CI {lo:+.3f} to {hi:+.3f}) on fresh "
        "interleaved runs: the ends' change is not found at any commit",
        "the ends' difference may be the load's: run `tracediff compare` on fresh runs of "
        "GOOD and BAD, or bisect again with a larger --repeat on the same -o (it reuses every "
        "capture)",
    )
    err.verdict = "not decided"
    raise err


def _ends(
    b: Bisection, spec: BisectSpec, say: Callable[[str], None], t0: float
) -> tuple[Any, dict[str, Any]]:
    """Step 1: GOOD and BAD captured interleaved, looked at each time RUNS_PER_EXTRA rounds are
    added up to --max-runs (tracediff/bisect/ends.py's rule, with the cycle time also tested with
    the round as the block over all looks at once); the comparison and what to follow, logged
    as step 0. NothingToBisect when nothing moved: "nothing to bisect", or, when `compare`'s
    test (or the blocked one at one look) calls the change significant, "not decided", with
    how many rounds would decide (`plan_max_runs`)."""
    good, bad = b.commits[0], b.commits[-1]
    n = spec.repeat
    planned = list(range(spec.repeat, b.max_runs, RUNS_PER_EXTRA)) + [b.max_runs]
    # a resumed call starts at the look its ends had reached (their runs), so that it logs the
    # same look as the first call did (the blocked test recomputes the earlier looks' regions)
    have = min(b.n_runs(good), b.n_runs(bad), b.max_runs)
    look = max(i for i, k in enumerate(planned) if k <= max(have, n))
    n = planned[look]
    while True:
        got = b.capture_ends(n)
        c0 = b.compare(good, bad)
        rounds = b.rounds(c0, b.folder(good), b.folder(bad))
        paired = be.paired_look(rounds, planned[: look + 1], b.max_runs)
        seen = b.follow(c0, None, paired)
        follow = seen.follow
        exhausted = min(got) < n
        if follow is not None or n >= b.max_runs or exhausted:
            break
        look += 1
        n = planned[look]
        say(f"the ends are not told apart at {planned[look - 1]} runs a side: capturing up to {n}")
    b.state["follow"] = follow
    b.state["log"] = []
    plan = None if follow is not None else be.plan_rounds(paired, max(got))
    longer = be.plan_cycles(c0, plan, b.run_seconds([good, bad])) if plan else None
    b.log(
        {
            **b.entry(bad, good, pool=True),  # step 0: the log was just emptied
            "decision": "regression" if follow else ends_verdict(c0, paired),
            "p_value": c0.p_value,
            "delta_ms_per_cycle": c0.delta_ms_per_cycle,
            "significant": bool(c0.significant),
            "look": look + 1,
            "looks_planned": len(planned),
            # the cycle time with the capture round as the block (engine/statistics/blocked.py)
            "paired": None if paired is None else paired.json(),
            # significant rows the rule did not follow, with why (tracediff/bisect/ends.py)
            "not_followed": seen.left_out,
            **({"plan_max_runs": plan} if plan else {}),
            # longer runs that would decide at less capture time (an estimate: be.plan_cycles)
            **({"plan_longer_runs": vars(longer)} if longer else {}),
            "wall_s": round(time.monotonic() - t0, 1),
        }
    )
    if follow is None:
        err = nothing_error(b, spec, c0, paired, seen, got, exhausted, plan)
        err.plan_longer = longer
        raise err
    return c0, follow


def ends_verdict(c0: Any, paired: be.Paired | None) -> str:
    """The ends' decision when nothing is followed: "not decided" where a test at one look
    (compare's across runs, or the blocked one) calls the change significant at 5 %."""
    if bool(c0.significant) or (paired is not None and paired.p_two <= 0.05):
        return "not decided"
    return "nothing to bisect"


def nothing_error(
    b: Bisection,
    spec: BisectSpec,
    c0: Any,
    paired: be.Paired | None,
    seen: be.Ends,
    got: list[int],
    exhausted: bool,
    plan: int | None,
) -> NothingToBisect:
    """The ends' error at the cap: "nothing to bisect" or "not decided" (`ends_verdict`), what
    was measured, why compare may disagree, and the runs a side that would decide (`plan`)."""
    good, bad = b.commits[0], b.commits[-1]
    verdict = ends_verdict(c0, paired)
    p = "n/a" if c0.p_value is None else f"{c0.p_value:.3f}"
    blocked = (
        ""
        if paired is None
        else f"; with the round as the block {paired.delta:+.3f} ms/cycle, p = {paired.p_two:.4f}"
        f" over {paired.rounds} rounds"
    )
    small = "".join(
        f"; {r['name']} {r['delta_ms_per_cycle']:+.3f} ms/cycle is significant but {r['why']}"
        for r in seen.left_out[:2]
    )
    why = ""
    if verdict == "not decided":
        why = (
            f": `compare` calls it significant at 5 % at one look; bisect asks {be.ALPHA_P:.0%} "
            "over all its looks at the ends (a false regression sends the search after "
            "nothing), and the change is too small against its run-to-run noise for that"
        )
    err = NothingToBisect(
        f"{verdict}: {good[:12]} and {bad[:12]} are not told apart across runs "
        f"(cycle time {c0.delta_ms_per_cycle:+.3f} ms/cycle, p = {p} at {got[0]} and {got[1]} "
        f"runs{blocked}"
        + (", too small against its run-to-run noise" if c0.significant and not why else "")
        + small
        + (f"; no contributor matching {spec.contributor!r} moved" if spec.contributor else "")
        + (f"; the pool has no more runs of them ({got[0]} and {got[1]})" if exhausted else "")
        + ")"
        + why,
        (
            f"about {plan} runs a side would decide it (the measured change and its round-to-round "
            f"spread): --max-runs {plan} on the same -o reuses every capture"
            + (" (capture them into the pool)" if exhausted else "")
            if plan
            else "check that BAD really is slower (the runs show no change)"
        ),
    )
    err.plan_max_runs = plan
    err.verdict = verdict
    return err
