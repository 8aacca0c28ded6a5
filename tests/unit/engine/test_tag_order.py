"""engine/cycle/ranges.py `_by_device`: where it takes the place of the four-key lexsort (ops in
start order per device, op rising), it gives the lexsort's order exactly, ties included; where
the ops are not in that order it gives None (the lexsort then)."""

from __future__ import annotations

import numpy as np
import pytest

from tracediff.engine.cycle import ranges


def _ops(seed: int, n: int = 5000) -> tuple[np.ndarray, ...]:
    """One file's ops: each device's in (start, end) order, merged by start alone, so at equal
    starts the ends of different devices fall in any order (as in a generated 8-GPU run)."""
    g = np.random.default_rng(seed)
    device = g.integers(0, 8, n).astype(np.int32)
    start = g.integers(0, n // 3, n)  # many equal starts, across and within devices
    end = start + g.integers(0, 4, n)
    per_device = np.lexsort([end, start, device])
    device, start, end = device[per_device], start[per_device], end[per_device]
    merged = np.argsort(start, kind="stable")
    return np.arange(n), device[merged], start[merged], end[merged]


@pytest.mark.parametrize("seed", range(6))
def test_the_lexsort_order_where_it_applies(seed: int) -> None:
    op, device, start, end = _ops(seed)
    ds, de = np.diff(start), np.diff(end)
    assert ((ds == 0) & (de < 0)).any()  # ends falling at equal starts, across devices
    got = ranges._by_device(op, device, start, end)
    assert got is not None
    assert np.array_equal(got, np.lexsort([op, end, start, device]))


@pytest.mark.parametrize("seed", range(3))
def test_none_where_a_device_is_out_of_order(seed: int) -> None:
    op, device, start, end = _ops(seed)
    i = np.flatnonzero((device[1:] == device[:-1]) & (start[1:] > start[:-1]))[0]
    start = start.copy()
    start[[i, i + 1]] = start[[i + 1, i]]  # two ops of one device swapped
    assert ranges._by_device(op, device, start, end) is None
    assert ranges._by_device(op[::-1].copy(), device, start, end) is None  # op not rising
