"""base/sortedsearch.py: the turned-round search gives numpy's numbers, whichever way it goes."""

from __future__ import annotations

import numpy as np
import pytest

from tracediff.base.sortedsearch import FEW, RATIO, search_sorted


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("seed", range(6))
def test_the_same_numbers_as_numpy(side: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 50))
    a = np.sort(rng.integers(0, 200, n))  # repeats, and values below, between and past v's
    v = np.sort(rng.integers(-20, 220, n * RATIO + int(rng.integers(2, 400))))
    got = search_sorted(a, v, side)
    assert got.dtype == np.intp
    assert np.array_equal(got, np.searchsorted(a, v, side=side))


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("seed", range(4))
def test_values_in_any_order_among_a_few_are_counted_to_numpys_numbers(
    side: str, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    a = np.sort(rng.choice(np.arange(-5, 40) * (1 << 40), int(rng.integers(1, FEW + 1))))
    v = rng.choice(np.r_[a, a + 1, a - 1, -(1 << 62), 1 << 62], 3000)  # equal, between, outside
    assert np.array_equal(search_sorted(a, v, side), np.searchsorted(a, v, side=side))


@pytest.mark.parametrize("side", ["left", "right"])
def test_values_out_of_order_or_too_few_are_searched_by_numpy(side: str) -> None:
    a = np.arange(FEW + 1) * 3
    v = np.arange(1000)[::-1].copy()  # falling, among more than a few: numpy answers
    assert np.array_equal(search_sorted(a, v, side), np.searchsorted(a, v, side=side))
    short = np.array([5, 6])
    assert np.array_equal(search_sorted(a, short, side), np.searchsorted(a, short, side=side))


def test_exact_ties_fall_on_the_side_asked() -> None:
    a = np.array([10, 20, 20, 30])
    v = np.repeat(np.array([5, 10, 20, 30, 35]), 20)
    left = search_sorted(a, v, "left").reshape(5, 20)[:, 0]
    right = search_sorted(a, v, "right").reshape(5, 20)[:, 0]
    assert left.tolist() == [0, 0, 1, 3, 4]
    assert right.tolist() == [0, 1, 3, 4, 4]
