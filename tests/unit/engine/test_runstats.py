"""The across-run test: exact permutation p-values, the inverted interval, calibration."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tracediff.engine.statistics import runstats
from tracediff.engine.statistics.runstats import ALPHA, across_runs, min_p, run_means


def brute_p(b: list[float], h: list[float]) -> float:
    """Two-sided permutation p-value by listing every split (independent of the vectorised one)."""
    pooled = b + h
    obs = abs(sum(h) / len(h) - sum(b) / len(b))
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), len(h)):
        hh = [pooled[i] for i in idx]
        bb = [pooled[i] for i in range(len(pooled)) if i not in idx]
        total += 1
        hits += abs(sum(hh) / len(hh) - sum(bb) / len(bb)) >= obs - 1e-12
    return hits / total


@pytest.mark.parametrize("nb,nh", [(4, 4), (5, 5), (3, 6), (6, 4)])
def test_p_value_equals_listing_every_split(nb: int, nh: int) -> None:
    rng = np.random.default_rng(nb * 10 + nh)
    base = rng.normal(3.0, 0.4, size=(6, nb))
    head = rng.normal(3.0, 0.4, size=(6, nh)) + np.array([0, 0.2, 0.5, 1.0, 2.0, -1.0])[:, None]
    t = across_runs(base, head)
    for i in range(6):
        assert t.p_value[i] == pytest.approx(brute_p(list(base[i]), list(head[i])), abs=1e-12)


@pytest.mark.parametrize("nb,nh", [(4, 4), (1, 3), (3, 1), (5, 4), (10, 8), (6, 12)])
def test_the_split_weights_are_every_head_group_the_observed_first(nb: int, nh: int) -> None:
    # the order the p-values and the interval were computed in before the matrix was filled as
    # one array (bisect's own time): the observed split, then itertools' order without it
    runstats._weights.cache_clear()
    w = runstats._weights(nb, nh)
    n = nb + nh
    observed = tuple(range(nb, n))
    groups = [observed] + [c for c in itertools.combinations(range(n), nh) if c != observed]
    want = np.full((len(groups), n), -1.0 / nb)
    for i, g in enumerate(groups):
        want[i, list(g)] = 1.0 / nh
    assert w.shape == want.shape and w.tobytes() == want.tobytes()
    assert not w.flags.writeable


def test_min_p_and_what_few_runs_can_decide() -> None:
    assert min_p(3, 3) == pytest.approx(0.1)  # 20 splits: never below 5 %
    assert min_p(4, 4) == pytest.approx(2 / 70)
    assert min_p(5, 5) == pytest.approx(2 / 252)
    # 3 vs 3 runs, however far apart: not significant, and the interval is unbounded (no finite
    # interval is supported by 6 numbers without assuming their distribution)
    t = across_runs(np.array([[1.0, 1.1, 0.9]]), np.array([[9.0, 9.1, 8.9]]))
    assert not t.decidable
    assert t.p_value[0] == pytest.approx(0.1)
    assert t.ci95_low[0] == -np.inf and t.ci95_high[0] == np.inf
    t = across_runs(np.array([[1.0, 1.1, 0.9, 1.05]]), np.array([[9.0, 9.1, 8.9, 9.05]]))
    assert t.decidable and t.p_value[0] < ALPHA and 0 < t.ci95_low[0] < 8 < t.ci95_high[0]


def test_interval_ends_are_where_the_shifted_test_turns() -> None:
    """Just inside each end, the head runs moved by -d are accepted (p >= 5 %); just outside,
    rejected; and the observed change is inside."""
    rng = np.random.default_rng(7)
    base = rng.normal(5.0, 0.5, size=(3, 5))
    head = rng.normal(5.0, 0.5, size=(3, 5)) + np.array([[0.0], [0.8], [3.0]])
    t = across_runs(base, head)
    for i in range(3):
        lo, hi, d = t.ci95_low[i], t.ci95_high[i], t.delta_ms[i]
        assert lo <= d <= hi
        for end, outward in ((lo, -1), (hi, +1)):
            inside = brute_p(list(base[i]), list(head[i] - (end - outward * 1e-6)))
            outside = brute_p(list(base[i]), list(head[i] - (end + outward * 1e-3)))
            assert inside >= ALPHA > outside


def test_run_means_average_each_runs_cycles() -> None:
    values = np.array([[1.0, 3.0, 10.0, 20.0, 30.0], [0.0, 0.0, 1.0, 1.0, 4.0]])
    runs = np.array([0, 0, 1, 1, 1])
    m = run_means(values, runs, 2)
    assert m.tolist() == [[2.0, 20.0], [0.0, 2.0]]


def _offset_runs(rng: np.random.Generator, n: int, shift: float) -> np.ndarray:
    """n runs' mean cycle times: a per-process offset U(0, 1.5 ms) + 20 cycles of N(0, 0.3)."""
    return 3.4 + shift + rng.uniform(0, 1.5, n) + rng.normal(0, 0.3, (n, 20)).mean(axis=1)


def test_same_vs_same_is_flagged_at_most_5_percent_and_a_real_shift_is_found() -> None:
    """Calibration on runs with per-process offsets (the noise one-run compare cannot see).
    Same-vs-same, 5 vs 5 runs: the exact test's level is floor(0.05 x 252) / 252 = 4.76 % <= 5 %
    by construction; over 1000 seeds the measured rate must match it within 3 binomial standard
    errors (a test that leaked offsets into the decision, as the cycle bootstrap does, gives
    ~60 %). +1.2 ms (2.7x the SD of the run means, the workload of issue 22): >= 95 % found."""
    seeds = 1000
    drawn = []  # per seed: base, head, shifted head (the seed's draws in that order)
    for s in range(seeds):
        rng = np.random.default_rng(s)
        drawn.append([_offset_runs(rng, 5, 0), _offset_runs(rng, 5, 0), _offset_runs(rng, 5, 1.2)])
    b, h, hs = (np.array(x) for x in zip(*drawn, strict=True))
    # one row a seed: the rows are tested independently (the same p-values as 2000 calls)
    same = int((across_runs(b, h).p_value < ALPHA).sum())
    shifted = int((across_runs(b, hs).p_value < ALPHA).sum())
    level = math.floor(ALPHA * 252) / 252
    assert level <= 0.05
    assert abs(same / seeds - level) < 3 * math.sqrt(level * (1 - level) / seeds)
    assert shifted / seeds >= 0.95
