"""engine/cycle/ranges.py `_by_device`: where it takes the place of the four-key lexsort (ops in
start order per device, op rising), it gives the lexsort's order exactly, ties included; where
the ops are not in that order it gives None (the lexsort then)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

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
    got = ranges._by_device(op, device, start, end, True)
    assert got is not None
    assert np.array_equal(got, np.lexsort([op, end, start, device]))


@pytest.mark.parametrize("seed", range(3))
def test_none_where_a_device_is_out_of_order(seed: int) -> None:
    op, device, start, end = _ops(seed)
    i = np.flatnonzero((device[1:] == device[:-1]) & (start[1:] > start[:-1]))[0]
    start = start.copy()
    start[[i, i + 1]] = start[[i + 1, i]]  # two ops of one device swapped
    assert ranges._by_device(op, device, start, end, True) is None
    assert ranges._by_device(op[::-1].copy(), device, start, end, False) is None  # op falls


@pytest.mark.parametrize("sorted_in", [True, False])
def test_one_device_in_order_is_not_gathered(sorted_in: bool) -> None:
    """One device whose ops come in (start, end) order, every op tagged: `_tagged` returns the
    ops as they are with cycle and phase; out of order, the lexsort's gather. Either way the
    frame the lexsort gives."""
    g = np.random.default_rng(5)
    n = 2000
    start = np.sort(g.integers(0, 500, n))
    end = start + g.integers(0, 3, n)
    if sorted_in:
        end = end[np.lexsort([end, start])]
        start = np.sort(start)
    else:
        start[[10, 11]] = start[[11, 10]] + np.array([0, 1])
    ops = pl.DataFrame({"device_id": pl.Series([3] * n, dtype=pl.Int32), "start_ns": start,
                        "end_ns": end, "x": g.integers(0, 9, n)})  # fmt: skip
    tags = pl.DataFrame({"_op": np.arange(n, dtype=np.uint32), "cycle": np.arange(n) // 10,
                         "phase": ["p"] * n})  # fmt: skip
    order = np.lexsort([np.arange(n), end, start, np.full(n, 3)])
    want = ops[order].with_columns(tags["cycle"][order], tags["phase"][order])
    assert_frame_equal(ranges._tagged(ops, tags), want)
    one = ranges._by_device(np.arange(n), np.full(n, 3), start, end, True)
    assert (one is not None) == sorted_in
