"""Statistics whose unit is the run: is a change real, or run-to-run noise?

Stage: engine (statistics). Input: per-contributor per-cycle values of both sides as matrices
[contributors x cycles] with the run each cycle came from; output: per contributor the change of
the mean over runs, an exact 95 % confidence interval, a p-value and a decision.

Why the run and not the cycle. Cycles of one process share that process's state: its cuBLAS
heuristics and autotune picks, its allocator layout, its clocks, its host threads' placement. A
second process of the same commit can sit 0.5-1.5 ms per cycle away from the first on every
cycle at once, so a CI over cycles of one run each (the bootstrap in `attribute.bootstrap_delta`)
measures only within-process jitter and calls that offset "significant" (issue 22: a commit
compared with itself gave "+27 %, significant"). Here each run contributes one number per
contributor, its mean per cycle, and the test compares those numbers.

The test: an exact permutation test on the difference of the run means, two-sided. Under "no
change" (the runs of both sides are exchangeable) every split of the pooled run means into a
base group and a head group is equally likely; the p-value is the fraction of splits whose
difference is at least as large as the observed one. Its level is at most alpha for any
distribution of the per-run values (no normality assumed: with 4 or 5 runs a side there is no way
to check it), where Welch's t-test is only near alpha. `bench/runstats.py` simulates both, and
the cycle bootstrap, on runs with per-process offsets: measured false-positive rates and power are
in bench/README.md. All splits are enumerated while there are at most `MAX_EXACT` of them (10
runs a side: 184,756), else `N_RANDOM` random splits with a fixed seed are drawn.

Small run counts cannot reach 5 % at all: with 3 runs a side there are 20 splits, and the
observed one is at least 2 of 20 (it and its mirror): p >= 0.1. `min_p` says what a run count
can reach, and the caller reports "undecided: too few runs" instead of "not significant".

The interval inverts the same test: the change d is inside the 95 % interval when moving every
head run by -d leaves a permutation p-value >= 0.05. It is found per contributor by bisection,
all contributors at once. Where the run counts cannot reach 5 %, the interval is unbounded
(-inf, +inf): no finite interval is supported by so few runs, and saying so is the point.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
MAX_EXACT = 200_000
"""Enumerate every split up to this many (10 vs 10 runs: 184,756)."""
N_RANDOM = 20_000
"""Random splits (fixed seed) beyond that; the p-value's Monte Carlo error is then <= 0.0035."""


@dataclass(frozen=True)
class RunTest:
    """Per contributor (one entry per row of the input matrices), in ms per cycle."""

    base_ms: np.ndarray  # mean over base runs of each run's mean per cycle
    head_ms: np.ndarray
    delta_ms: np.ndarray  # head_ms - base_ms
    ci95_low: np.ndarray  # -inf / +inf where the run counts cannot reach 5 %
    ci95_high: np.ndarray
    p_value: np.ndarray
    spread_ms: np.ndarray  # between-run standard deviation of base's run means (noise floor)
    runs_base: int
    runs_head: int

    @property
    def decidable(self) -> bool:
        """Whether these run counts can reach p < ALPHA at all."""
        return min_p(self.runs_base, self.runs_head) < ALPHA


def min_p(n_base: int, n_head: int) -> float:
    """The smallest two-sided p-value an exact permutation test on n_base vs n_head runs can give."""
    if n_base < 1 or n_head < 1:
        return 1.0
    splits = math.comb(n_base + n_head, n_head)
    return min(1.0, 2.0 / splits)


@functools.lru_cache(maxsize=8)
def _weights(n_base: int, n_head: int) -> np.ndarray:
    """[splits x runs]: each row gives +1/n_head to the runs put in the head group and -1/n_base
    to the others, so (values @ W.T) is every split's difference of means. The first row is the
    observed split (head runs last)."""
    n = n_base + n_head
    splits = math.comb(n, n_head)
    if splits <= MAX_EXACT:
        # every head group in itertools' (lexicographic) order, whose last is the observed one,
        # moved first; filled as one array, not row by row (a Python loop over 167,960 splits
        # at 11 v 9 runs took 2.5 s a run count in bisect's looks, issue 31's own time)
        groups = np.fromiter(
            itertools.chain.from_iterable(itertools.combinations(range(n), n_head)),
            dtype=np.intp,
            count=splits * n_head,
        ).reshape(splits, n_head)
        groups = np.concatenate([groups[-1:], groups[:-1]])
        rows = np.zeros((splits, n), dtype=bool)
        rows[np.arange(splits)[:, None], groups] = True
    else:
        rng = np.random.default_rng(0)
        keys = rng.random((N_RANDOM, n))
        ranks = np.argsort(keys, axis=1)
        rows = np.zeros((N_RANDOM + 1, n), dtype=bool)
        rows[0, n_base:] = True
        np.put_along_axis(rows[1:], ranks[:, :n_head], True, axis=1)
    w = np.where(rows, 1.0 / n_head, -1.0 / n_base)
    w.flags.writeable = False
    return w


def _p_values(pooled: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Two-sided permutation p-value per row of pooled [C x runs] (base runs first)."""
    diffs = pooled @ w.T  # [C x splits]
    obs = np.abs(diffs[:, :1])
    # a split counts when its |difference| is not below the observed one, within rounding
    tol = 1e-9 * np.maximum(obs, np.abs(pooled).max(axis=1, keepdims=True, initial=0.0))
    hits: np.ndarray = (np.abs(diffs) >= obs - tol).mean(axis=1)
    return hits


def run_means(values: np.ndarray, run_of_cycle: np.ndarray, n_runs: int) -> np.ndarray:
    """[C x cycles] per-cycle values and each cycle's run (0..n_runs-1) -> [C x n_runs] means.
    A run with no cycle gives NaN (the caller drops such runs)."""
    counts = np.bincount(run_of_cycle, minlength=n_runs).astype(np.float64)
    sums = np.zeros((values.shape[0], n_runs))
    np.add.at(sums.T, run_of_cycle, values.T)
    with np.errstate(invalid="ignore", divide="ignore"):
        means: np.ndarray = sums / counts
    return means


def across_runs(base: np.ndarray, head: np.ndarray, iters: int = 48) -> RunTest:
    """The test and interval for each row of base [C x runs_base] and head [C x runs_head], the
    per-run means per cycle (ns or ms: the result is in the same unit)."""
    nb, nh = base.shape[1], head.shape[1]
    if base.shape[0] != head.shape[0]:
        raise ValueError("base and head must have the same rows")
    bm, hm = base.mean(axis=1), head.mean(axis=1)
    delta = hm - bm
    spread = base.std(axis=1, ddof=1) if nb >= 2 else np.full(base.shape[0], np.nan)
    c = base.shape[0]
    if nb < 1 or nh < 1:
        nan = np.full(c, np.nan)
        return RunTest(bm, hm, delta, nan, nan, np.ones(c), spread, nb, nh)
    w = _weights(nb, nh)
    pooled = np.concatenate([base, head], axis=1)
    p = _p_values(pooled, w)
    if min_p(nb, nh) >= ALPHA:
        inf = np.full(c, np.inf)
        return RunTest(bm, hm, delta, -inf, inf.copy(), p, spread, nb, nh)
    lo = _bound(base, head, delta, w, -1.0, iters)
    hi = _bound(base, head, delta, w, +1.0, iters)
    return RunTest(bm, hm, delta, lo, hi, p, spread, nb, nh)


def _bound(
    base: np.ndarray, head: np.ndarray, delta: np.ndarray, w: np.ndarray, sign: float, iters: int
) -> np.ndarray:
    """The end of the 95 % interval on the `sign` side of delta: the shift d furthest from delta
    (in that direction) at which the shifted test still has p >= ALPHA. Bisection between delta
    (inside: p = 1 there) and a point far enough out (outside), every row at once."""
    # every split's difference is within the range of the pooled values, so a shift beyond that
    # range plus |delta| makes the observed split the most extreme: outside (p = min_p < ALPHA)
    span = np.concatenate([base, head], axis=1)
    width = span.max(axis=1) - span.min(axis=1)
    inside = delta.copy()
    outside = delta + sign * (2.0 * width + np.abs(delta) + 1e-12)

    def accepted(d: np.ndarray) -> np.ndarray:
        pooled = np.concatenate([base, head - d[:, None]], axis=1)
        return _p_values(pooled, w) >= ALPHA

    for _ in range(iters):
        mid = 0.5 * (inside + outside)
        ok = accepted(mid)
        inside = np.where(ok, mid, inside)
        outside = np.where(ok, outside, mid)
    return inside
