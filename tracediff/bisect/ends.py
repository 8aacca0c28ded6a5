"""`tracediff bisect`'s ends' test: do GOOD and BAD differ across runs, and in what to follow.

Stage: bisect (the statistics of tracediff/bisect/bisection.py's step 1; `Bisection.follow` calls it). Input:
the engine's comparison of GOOD's run set with BAD's and which look at the ends this is; output:
the followed quantities (the cycle time, or attribution rows) or none ("nothing to bisect").

Why a rule of its own. The ends are looked at up to K times (N runs a side, then 2 more while
they are not told apart, up to --max-runs), and each look tests the cycle time and every
candidate row (the host phases of an NVTX-only run, the GPU-work rows of a GPU run: tens to
hundreds). Taking whatever came out significant at 95 % at any look called two commits of the
same code a regression: a host row "(outside phases)" at -0.005 ms/cycle, significant at the
third look (8 runs a side), was followed and bisected on. With 4 runs a side no correction by
p-values alone can help: the exact permutation test's smallest p there is 2/70 = 0.029, so a
level split over looks or rows (Holm's alpha/m) is never reached. What keeps chance out is size.

The rule. A quantity is followed when, at this look:

1. it is significant (its across-run 95 % CI excludes 0, engine/statistics/runstats.py);
2. it is large against its run-to-run noise: the 95 % CI's end nearest 0 is at least PRECISION
   (half) of the change, i.e. the change shrunk by half would still be significant. Under "no
   change" this passes 0.35 % of rows at 4 runs a side, 0.15-0.27 % at 6 and 8 (simulated on the
   engine's test: normal, uniform and log-normal run means, 4,000 draws each), where
   significance alone passes 2.9-5.3 %; a real change of 8 ms over uniform 0-6 ms per-process
   offsets passes it in 61 % of 4-run draws and 99.9 % of 6-run ones (the others add 2 runs).
   The cycle time may instead be found changed by the round-blocked test (engine/statistics/blocked.py):
   GOOD and BAD are captured interleaved (A B B A ...), so each pair of rounds is a block
   whose labels alone are exchanged, and load drift slower than a block cancels; its
   group-sequential form keeps the chance of a false "slower" over every look up to
   --max-runs at ALPHA_P (1 %, one-sided: bisect asks whether BAD is slower) exactly, without
   splitting it by the number of looks (issue
   31: the former route, the unpaired p <= 1 % / 3 at each look, gave "nothing to bisect" at
   +22 ms, p 0.005, where head was slower in 11 of 12 rounds). bench/blocked.py: under a
   random-walk drift of 1.5 ms a capture and 0-6 ms per-process offsets, a +4 ms change found
   by 59.5 % of 3-look bisections against 24.0 % for the former route, at 1.0 % and 0.0 %
   false positives (200 seeds a cell). A resume with a larger --max-runs is a new plan of
   looks with its own 1 % (the looks already made are recomputed under it, so their regions
   shrink): following the printed advice once can at most double the level, to 2 %. Runs that
   cannot be placed in rounds (a pool of
   reports captured by hand, a run with no cycle) have only the precision route;
3. a row only: it carries at least MATERIAL (10 %) of the candidate rows' summed |change| (the
   weight it would have in bisect/step.vote): a small row that came out significant beside a
   large one that swung is not the regression (the -0.005 "(outside phases)" beside verify's
   +-1 ms), and at most 10 rows are followed.

The cycle time is followed when it passes 1-2; else the rows that pass 1-3; else nothing at this
look (more runs, or at the cap "nothing to bisect", or "not decided" where `compare`'s one-look
test calls the change significant: then with how many runs a side would decide, `plan_rounds`).
`--contributor` rows pass 1-3 among the rows it matches. Under "no change" the cycle time passes
the blocked route in at most 1 % of bisections whatever the looks (exact), and the precision
route in 0.15-0.35 % of looks; each row about as often before materiality, which the chance rows
beside a swinging one fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tracediff.engine.statistics import blocked as bk

ALPHA_P = 0.01
"""The cycle time's p-value route (rule 2), split evenly over the looks."""
PRECISION = 0.5
"""The 95 % CI's end nearest 0 must be at least this part of the change."""
MATERIAL = 0.1
"""A followed row carries at least this part of the candidate rows' summed |change|."""


def precise(delta: float, lo: float, hi: float) -> bool:
    """The change is large against its noise: the CI excludes 0 and its end nearest 0 is at least
    PRECISION of the change (infinite or NaN CIs never are)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or delta == 0:
        return False
    near = lo if delta > 0 else -hi
    return near > 0 and near >= PRECISION * abs(delta)


@dataclass
class Ends:
    """One look's outcome: what to follow (None: nothing yet) and the rows left out, with why."""

    follow: dict[str, Any] | None
    left_out: list[dict[str, Any]]
    level: float | None


def cycle_time_moved(c: Any, level: float | None, paired: Paired | None = None) -> bool:
    """Rules 1-2 for the cycle time of comparison `c`: precise, or p <= `level` (None: no p
    route), or (the ends) the round-blocked sequential test `paired` found the change."""
    lo, hi = (float(x) for x in c.delta_ci95)
    d, p = float(c.delta_ms_per_cycle), c.p_value
    if (
        paired is not None
        and paired.moved
        and math.copysign(1.0, paired.delta) == math.copysign(1.0, d)
    ):
        return True
    route = level is not None and p is not None and p <= level
    return bool(c.significant) and (precise(d, lo, hi) or route)


@dataclass
class Paired:
    """The ends' cycle time tested with the capture round as the block (engine/statistics/blocked.py) over
    every look so far, at ALPHA_P in all (exact: no split by the number of looks), one-sided:
    is BAD slower than GOOD."""

    moved: bool
    delta: float  # mean of B's runs - mean of A's, over the paired rounds
    p_two: float  # this look's two-sided p (one look, for the report)
    ci95: tuple[float, float]
    rounds: int
    blocks: int
    diffs: list[float]  # per round: B's run - A's run (both present)
    look: int | None  # the look (1-based) whose region held the data, None: not yet
    spent: list[float]

    def json(self) -> dict[str, Any]:
        return {
            "moved": self.moved,
            "delta_ms_per_cycle": self.delta,
            "p_value": self.p_two,
            "ci95": list(self.ci95),
            "rounds": self.rounds,
            "blocks": self.blocks,
            "at_look": self.look,
            "alpha_spent": self.spent,
        }


def paired_look(
    rounds: tuple[list[float], list[float]] | None, looks: list[int], planned: int
) -> Paired | None:
    """The round-blocked test of the ends' run means by round (None: not placed in rounds) at
    looks of `looks` rounds so far, `planned` (--max-runs) the last: exact error control at
    ALPHA_P over all of them (blocked.sequential)."""
    if rounds is None:
        return None
    a, b = rounds
    n = min(len(a), len(b))
    looks = sorted({min(k, n) for k in looks if k > 0})
    if n < 2 or not looks:
        return None
    a, b = a[:n], b[:n]
    # one-sided: BAD slower than GOOD is the question bisect asks (--bad: a later commit that
    # is slow); the same 1 % then buys twice the resolution
    seq = bk.sequential(a, b, looks, planned, ALPHA_P, two_sided=False)
    t = bk.blocked_test(bk.blocks_of(a, b, looks))
    diffs = [y - x for x, y in zip(a, b, strict=True) if math.isfinite(x) and math.isfinite(y)]
    return Paired(
        moved=seq.rejected_at is not None,
        delta=t.delta,
        p_two=t.p_two,
        ci95=(t.ci_low, t.ci_high),
        rounds=len(diffs),
        blocks=t.blocks,
        diffs=diffs,
        look=None if seq.rejected_at is None else seq.rejected_at + 1,
        spent=list(seq.spent),
    )


def plan_rounds(paired: Paired | None, have: int) -> int | None:
    """About how many rounds a side would decide the ends (blocked.rounds_needed at ALPHA_P,
    one-sided as the test, 80 % power), even and above `have`; None when the rounds show no
    change."""
    if paired is None:
        return None
    need = bk.rounds_needed(paired.diffs, ALPHA_P)
    if need is None:
        return None
    need = max(need, have + 2)
    return need + need % 2


@dataclass(frozen=True)
class LongerRuns:
    """Runs `times` as long (about `cycles` cycles a run) and `runs` a side would decide the ends
    at less capture time than `plan_rounds`' runs at the present length."""

    times: int
    cycles: int
    runs: int
    seconds: float  # the estimated capture time a side, against `seconds_now`
    seconds_now: float


def plan_cycles(
    c: Any, plan: int | None, run_s: float | None, factors: tuple[int, ...] = (2, 3, 4, 6, 8, 10)
) -> LongerRuns | None:
    """Whether longer runs would decide the ends more cheaply than `plan` runs a side (None: no).

    A run's mean varies by sb2 + sw2 / C: sb2 from run to run (per-process offsets, load), sw2
    from cycle to cycle within a run, C its cycles. sw2 is each side's per-cycle variance less
    that of its run means, sb2 what the run means vary by beyond sw2 / C; runs k times as long
    need about plan x (sb2 + sw2 / kC) / (sb2 + sw2 / C) runs a side (at least the blocked
    test's floor, 6). A run costs its fixed part (process start, nsys, import: `run_s` less C
    cycles) plus k C cycles. Estimates from the ends' runs, not a test."""
    if not plan or not run_s:
        return None
    parts = []
    for side in (c.base, c.head):
        means = np.asarray(side.run_means_ms, dtype=np.float64)
        if len(means) < 2 or side.runs < 2 or not side.cycles:
            return None
        rm2 = float(means.var(ddof=1))
        per = side.wall_mean_ms if side.wall_mean_ms is not None else side.mean_ms
        parts.append((rm2, max(float(side.std_ms) ** 2 - rm2, 0.0), side.cycles / side.runs, per))
    rm2, sw2, cycles, cycle_ms = (sum(x) / 2 for x in zip(*parts, strict=True))
    sb2 = max(rm2 - sw2 / cycles, 0.0)
    fixed = max(run_s - cycles * cycle_ms / 1000, 0.0)
    now = plan * run_s
    best = None
    for k in factors:
        runs = max(math.ceil(plan * (sb2 + sw2 / (k * cycles)) / (sb2 + sw2 / cycles)), 6)
        cost = runs * (fixed + k * cycles * cycle_ms / 1000)
        if cost < now and (best is None or cost < best.seconds):
            best = LongerRuns(k, round(k * cycles), runs, cost, now)
    return best


def pick_rows(cands: pl.DataFrame) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """The candidate rows that pass the rule (significant, precise, material) and the significant
    ones that did not, each with why."""
    total = float(cands["delta_ms_per_cycle"].abs().sum()) if cands.height else 0.0
    keep, out = [], []
    sig = cands.with_columns(pl.col("significant").fill_null(False)).filter(pl.col("significant"))
    for i, r in enumerate(sig.iter_rows(named=True)):
        d = float(r["delta_ms_per_cycle"])
        share = abs(d) / total if total > 0 else 0.0
        why = None
        if not precise(d, float(r["ci95_low"]), float(r["ci95_high"])):
            why = "small against its run-to-run noise"
        elif share < MATERIAL:
            why = f"{100 * share:.0f} % of the rows' change"
        if why is None:
            keep.append(i)
        else:
            out.append({"kind": r["kind"], "name": r["name"], "delta_ms_per_cycle": d, "why": why})
    return sig[keep] if keep else sig.clear(), out
