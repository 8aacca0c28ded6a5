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

1. it is significant (its across-run 95 % CI excludes 0, engine/runstats.py);
2. it is large against its run-to-run noise: the 95 % CI's end nearest 0 is at least PRECISION
   (half) of the change, i.e. the change shrunk by half would still be significant. Under "no
   change" this passes 0.35 % of rows at 4 runs a side, 0.15-0.27 % at 6 and 8 (simulated on the
   engine's test: normal, uniform and log-normal run means, 4,000 draws each), where
   significance alone passes 2.9-5.3 %; a real change of 8 ms over uniform 0-6 ms per-process
   offsets passes it in 61 % of 4-run draws and 99.9 % of 6-run ones (the others add 2 runs).
   The cycle time may instead have p <= its look's level: ALPHA_P (1 %) split evenly over the K
   looks (Bonferroni, valid however the looks depend on each other; 0.33 % each for N = 4,
   --max-runs 8, which 4 runs a side cannot reach and 6 can): where a load spike widens the CI
   of a real change, a complete separation of the runs still tells it (simulated with 15 % of
   runs slowed by an exponential 8 ms: 81 % found by the third look, 73 % by precision alone);
3. a row only: it carries at least MATERIAL (10 %) of the candidate rows' summed |change| (the
   weight it would have in bisect/step.vote): a small row that came out significant beside a
   large one that swung is not the regression (the -0.005 "(outside phases)" beside verify's
   +-1 ms), and at most 10 rows are followed.

The cycle time is followed when it passes 1-2; else the rows that pass 1-3; else nothing at this
look (more runs, or "nothing to bisect" at the cap). `--contributor` rows pass 1-3 among the rows
it matches. Over the 3 default looks the cycle time passes under "no change" in about 1 % of
simulated bisections (uniform offsets, with and without load spikes; 8.6 % for the former "any
look significant at 5 %"); each row about as often before materiality, which the chance rows
beside a swinging one fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

ALPHA_P = 0.01
"""The cycle time's p-value route (rule 2), split evenly over the looks."""
PRECISION = 0.5
"""The 95 % CI's end nearest 0 must be at least this part of the change."""
MATERIAL = 0.1
"""A followed row carries at least this part of the candidate rows' summed |change|."""


def look_levels(repeat: int, max_runs: int, step: int) -> list[float]:
    """The cycle time's p-value level at each look at the ends (N, N + step, ... up to max_runs
    runs a side): ALPHA_P split evenly, so that they sum to it."""
    k = 1 + max(0, math.ceil((max_runs - repeat) / step))
    return [ALPHA_P / k] * k


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
    level: float


def cycle_time_moved(c: Any, level: float) -> bool:
    """Rules 1-2 for the cycle time of comparison `c` at a look of p-value level `level`."""
    lo, hi = (float(x) for x in c.delta_ci95)
    d, p = float(c.delta_ms_per_cycle), c.p_value
    return bool(c.significant) and (precise(d, lo, hi) or (p is not None and p <= level))


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
