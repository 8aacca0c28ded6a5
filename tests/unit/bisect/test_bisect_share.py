"""tracediff/bisect/share.py: a culprit's share and its interval (`tracediff bisect`)."""

from __future__ import annotations

import math

import numpy as np

from tracediff.bisect.share import ratio_ci
from tracediff.engine.statistics import runstats as rs


def test_the_ratio_interval_takes_both_intervals() -> None:
    assert ratio_ci((4.0, 12.0), (12.0, 20.0)) == [0.2, 1.0]
    assert ratio_ci((-12.0, -4.0), (-20.0, -12.0)) == [0.2, 1.0]  # a speed-up bisected
    assert ratio_ci((-1.0, 3.0), (2.0, 4.0)) == [-0.5, 1.5]
    # the ends' change not told from 0, or too few runs for a finite CI: no interval
    assert ratio_ci((4.0, 12.0), (-1.0, 20.0)) == [-math.inf, math.inf]
    assert ratio_ci((-math.inf, math.inf), (12.0, 20.0)) == [-math.inf, math.inf]


def test_a_half_is_covered_once_the_ends_error_counts() -> None:
    """Two culprits each adding 8 ms over per-process offsets uniform in 0-6 ms, 4 runs a side
    (tests/integration/test_bisect.py's two-culprit case without drift between run sets, which the
    interleaved re-measure is for): over the ends' CI the interval covers the true 0.5 in >= 95 %
    of draws (99 % here; the step's CI over the ends' point change: 97.5 %)."""
    rng = np.random.default_rng(18)
    k = 400
    good, bad = rng.uniform(0, 6, (k, 4)), rng.uniform(0, 6, (k, 4)) + 16.0
    parent, culprit = rng.uniform(0, 6, (k, 4)), rng.uniform(0, 6, (k, 4)) + 8.0
    ends, step = rs.across_runs(good, bad, iters=30), rs.across_runs(parent, culprit, iters=30)
    old = new = 0
    for i in range(k):
        num = (float(step.ci95_low[i]), float(step.ci95_high[i]))
        lo, hi = (x / float(ends.delta_ms[i]) for x in num)
        old += lo <= 0.5 <= hi
        low, high = ratio_ci(num, (float(ends.ci95_low[i]), float(ends.ci95_high[i])))
        new += low <= 0.5 <= high
    assert new / k >= 0.95 and new >= old
