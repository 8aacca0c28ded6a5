"""base/devorder.py: the device-major order (device, start, end; ties as they came) that the
engine aligns ops in and a run file stores its kernels and copies in."""

from __future__ import annotations

import numpy as np
import pytest

from tracediff.base import devorder


def _merged(seed: int, n: int = 4000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of 8 devices, each device's in (start, end) order, merged by start alone (so ends
    fall at equal starts across devices), as a file's kernels are read."""
    g = np.random.default_rng(seed)
    device = g.integers(0, 8, n).astype(np.int32)
    start = g.integers(0, n // 3, n)
    end = start + g.integers(0, 4, n)
    own = np.lexsort([end, start, device])
    device, start, end = device[own], start[own], end[own]
    by_start = np.argsort(start, kind="stable")
    return device[by_start], start[by_start], end[by_start]


@pytest.mark.parametrize("seed", range(4))
def test_the_stable_three_key_order(seed: int) -> None:
    device, start, end = _merged(seed)
    want = np.lexsort([np.arange(len(device)), end, start, device])
    got = devorder.by_device(device, start, end)
    assert got is not None and np.array_equal(got, want)
    assert np.array_equal(devorder.device_major(device, start, end), want)
    # in that order already: the rows as they are, no sort
    d, s, e = device[want], start[want], end[want]
    assert np.array_equal(devorder.by_device(d, s, e), np.arange(len(d)))


@pytest.mark.parametrize("seed", range(3))
def test_out_of_order_within_a_device_is_lexsorted(seed: int) -> None:
    device, start, end = _merged(seed)
    g = np.random.default_rng(seed)
    shuffled = g.permutation(len(device))
    device, start, end = device[shuffled], start[shuffled], end[shuffled]
    assert devorder.by_device(device, start, end) is None
    order = devorder.device_major(device, start, end)
    assert np.array_equal(order, np.lexsort([end, start, device]))
    # device-major but one device's rows swapped: not taken as in order
    d, s, e = device[order], start[order], end[order]
    i = int(np.flatnonzero((d[1:] == d[:-1]) & (s[1:] > s[:-1]))[0])
    s = s.copy()
    s[[i, i + 1]] = s[[i + 1, i]]
    assert devorder.by_device(d, s, e) is None


def test_short_inputs() -> None:
    one = np.array([3])
    assert np.array_equal(devorder.device_major(one, one, one), [0])
    none = np.array([], np.int64)
    assert len(devorder.device_major(none, none, none)) == 0
