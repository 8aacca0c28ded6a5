"""engine/statistics/resample.py: the native multinomial draws are numpy's, number for number,
and leave the generator where numpy leaves it; what the C module does not draw, numpy does."""

from __future__ import annotations

import numpy as np
import pytest

from tracediff.engine.statistics import resample


@pytest.mark.parametrize("d", [1, 2, 3, 17, 600, 6000])
@pytest.mark.parametrize("n_of", [lambda d: d, lambda d: max(1, d // 3), lambda d: 2 * d + 1])
def test_uniform_draws_are_numpys(d: int, n_of) -> None:  # type: ignore[no-untyped-def]
    n, rows = n_of(d), 40 if d > 1000 else 200
    pvals = np.full(d, 1.0 / d)
    for seed in range(3):
        mine, theirs = np.random.default_rng(seed), np.random.default_rng(seed)
        got = resample.multinomial_rows(mine, n, pvals, rows)
        want = theirs.multinomial(n, pvals, size=rows)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert mine.bit_generator.state == theirs.bit_generator.state


def test_uneven_pvals_and_numpys_other_algorithm() -> None:
    """Uneven probabilities (some > 0.5, flipped; zeros) and draws of n p > 30, which the C
    module leaves to numpy (BTPE): the same numbers either way."""
    cases = [(np.array([0.7, 0.2, 0.1]), 25), (np.array([0.0, 0.5, 0.0, 0.5]), 9)]
    gen = np.random.default_rng(7)
    for _ in range(20):
        p = gen.random(int(gen.integers(2, 40)))
        cases.append((p / p.sum(), int(gen.integers(0, 300))))
    cases.append((np.array([0.5, 0.5]), 1000))  # n p = 500: BTPE
    cases.append((np.array([0.25, 0.75]), 0))  # nothing to draw: no number used
    for pvals, n in cases:
        mine, theirs = np.random.default_rng(3), np.random.default_rng(3)
        got = resample.multinomial_rows(mine, n, pvals, 100)
        assert np.array_equal(got, theirs.multinomial(n, pvals, size=100)), (pvals, n)
        assert mine.random() == theirs.random()


def test_the_module_is_built() -> None:
    """pip builds it (pyproject's ext-modules); without it the bootstrap is numpy's, slower."""
    assert resample.multinomial is not None
