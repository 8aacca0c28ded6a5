"""The round-blocked permutation test (tracediff/engine/statistics/blocked.py): exact level, one look and
sequential, by enumerating every relabelling of fixed data; drift cancelled; its interval."""

from __future__ import annotations

import itertools
import math

import numpy as np

from tracediff.engine.statistics import blocked as bk
from tracediff.engine.statistics.runstats import across_runs


def relabellings(a: np.ndarray, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every within-block relabelling of rounds paired into blocks of two (A B B A): the null
    world the test claims to be exact over."""
    rounds = len(a)
    per_block = []
    for start in range(0, rounds, 2):
        vals = list(a[start : start + 2]) + list(b[start : start + 2])
        per_block.append([(vals, c) for c in itertools.combinations(range(4), 2)])
    out = []
    for pick in itertools.product(*per_block):
        na, nb = [], []
        for vals, c in pick:
            nb += [vals[i] for i in c]
            na += [vals[i] for i in range(4) if i not in c]
        out.append((np.array(na), np.array(nb)))
    return out


def test_one_look_is_exact_over_every_relabelling() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 6), rng.normal(0.5, 1, 6)
    worlds = relabellings(a, b)
    assert len(worlds) == 6**3
    p = [min(1.0, 2 * min(bk.p_values(bk.blocks_of(x, y)))) for x, y in worlds]
    for level in (0.01, 0.05, 0.1):
        assert np.mean(np.array(p) <= level) <= level + 1e-12


def test_sequential_error_is_at_most_alpha_over_all_looks() -> None:
    """Looks at 2, 4 and 6 rounds of 8 planned: over every relabelling of fixed values, the
    share called changed at any look is <= alpha (a Bonferroni-free exact bound), and an earlier
    look decides on its own rounds only (the same arrangement decides the same at 4 rounds
    whatever came later)."""
    rng = np.random.default_rng(5)
    a, b = rng.normal(0, 1, 6), rng.normal(0, 1, 6)
    worlds = relabellings(a, b)
    alpha = 0.05
    hits = [bk.sequential(x, y, [2, 4, 6], 8, alpha).rejected_at for x, y in worlds]
    rate = np.mean([h is not None for h in hits])
    assert 0 < rate <= alpha + 1e-12, rate
    early = [bk.sequential(x[:4], y[:4], [2, 4], 8, alpha).rejected_at for x, y in worlds]
    assert all((h == e) or (e is None and h == 2) for h, e in zip(hits, early, strict=True))
    # one-sided (B above A, as bisect's ends ask): exact too, and only ever in that direction
    one = [bk.sequential(x, y, [2, 4, 6], 8, alpha, two_sided=False) for x, y in worlds]
    called = [(x, y) for (x, y), r in zip(worlds, one, strict=True) if r.rejected_at is not None]
    assert 0 < len(called) / len(worlds) <= alpha + 1e-12
    assert all(y.mean() > x.mean() for x, y in called)


def test_drift_between_blocks_cancels_where_the_unpaired_test_drowns() -> None:
    """The load moves by up to 20 ms between blocks (minutes apart) and by little inside one (4
    captures in a row); B is 2 ms slower: every block shows it, the run means' spread hides it."""
    load = np.repeat([0.0, 12.0, -5.0, 20.0], 2)  # per round, constant over a block
    rng = np.random.default_rng(2)
    a = load + rng.normal(0, 0.3, 8)
    b = load + 2.0 + rng.normal(0, 0.3, 8)
    t = bk.blocked_test(bk.blocks_of(a, b))
    assert t.p_greater <= 1 / 6**4 + 1e-12 and t.ci_low > 0
    assert bk.sequential(a, b, [4, 6, 8], 8, 0.01).rejected_at is not None
    assert across_runs(a[None, :], b[None, :]).p_value[0] > 0.3


def test_interval_inverts_the_test_and_is_unbounded_below_resolution() -> None:
    rng = np.random.default_rng(11)
    a, b = rng.normal(0, 1, 8), rng.normal(3, 1, 8)
    blocks = bk.blocks_of(a, b)
    t = bk.blocked_test(blocks, alpha=0.025)
    assert t.ci_low < t.delta < t.ci_high
    # just inside the low end the shifted test is not rejected; well outside it is
    assert bk.p_values(blocks, t.ci_low + 1e-6)[0] > 0.025
    assert bk.p_values(blocks, t.ci_low - 0.05)[0] <= 0.025
    two = bk.blocked_test(bk.blocks_of(a[:4], b[:4]), alpha=0.025)  # 36 arrangements
    assert two.ci_low == -math.inf and two.ci_high == math.inf


def test_a_missing_run_leaves_its_round_partner_in_a_smaller_block() -> None:
    a = np.array([1.0, 2.0, np.nan, 1.5])
    b = np.array([3.0, 4.0, 3.5, np.nan])
    blocks = bk.blocks_of(a, b)
    assert [len(v) for v in blocks.values] == [4, 2]
    assert blocks.n_a == 3 and blocks.n_b == 3
    # one side only in a block: it carries nothing
    assert bk.blocks_of([1.0, 2.0], [np.nan, np.nan]).values == ()


def test_rounds_needed_grows_with_the_spread() -> None:
    quiet = bk.rounds_needed([2.0, 2.5, 1.5, 2.2], alpha=0.01)
    loud = bk.rounds_needed([2.0, 6.5, -2.5, 2.2], alpha=0.01)
    assert quiet is not None and loud is not None and loud > quiet >= 6
    assert bk.rounds_needed([1.0, -1.0], alpha=0.01) is None
