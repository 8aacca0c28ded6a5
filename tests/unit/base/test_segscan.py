"""tracediff.base.segscan: the segmented running max and sum used by the engine and the replay.

Checked against a per-segment numpy reference on random segment layouts, including values far
apart (the one-pass lift would leave int64: the banded and per-segment fallbacks) and the
replay's "no release" sentinel.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracediff.base.segscan import seg_cummax, seg_cumsum, seg_starts
from tracediff.replay.order import NEG

I64 = np.iinfo(np.int64)


def _reference(x: np.ndarray, seg: np.ndarray, op: np.ufunc) -> np.ndarray:
    """op.accumulate over each run of equal `seg` values, run by run."""
    out = np.empty_like(x)
    a = 0
    for b in range(1, len(x) + 1):
        if b == len(x) or seg[b] != seg[a]:
            out[a:b] = op.accumulate(x[a:b])
            a = b
    return out


@st.composite
def segmented(draw: st.DrawFn, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 40))
    values = draw(st.lists(st.integers(lo, hi), min_size=n, max_size=n))
    steps = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))  # 0: same segment
    return np.array(values, dtype=np.int64), np.cumsum(steps).astype(np.int64)


WIDE = st.sampled_from([10, 1 << 40, 1 << 61, I64.max])


@settings(max_examples=300, deadline=None)
@given(data=st.data(), scale=WIDE, sentinel=st.booleans())
def test_cummax_restarts_at_each_segment(data: st.DataObject, scale: int, sentinel: bool) -> None:
    x, seg = data.draw(segmented(-scale if scale < I64.max else I64.min, scale))
    if sentinel:
        x[::3] = NEG
    want = _reference(x, seg, np.maximum)
    first = seg_starts(seg)
    assert np.array_equal(seg_cummax(x, seg), want)
    assert np.array_equal(seg_cummax(x, seg, first), want)
    assert np.array_equal(seg_cummax(x, seg, np.flatnonzero(first)), want)
    before = x.copy()
    assert np.array_equal(seg_cummax(x, seg), want) and np.array_equal(x, before)  # x kept
    assert np.array_equal(seg_cummax(x.copy(), seg, first, overwrite=True), want)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_cumsum_restarts_where_the_label_changes(data: st.DataObject) -> None:
    x, seg = data.draw(segmented(-(10**9), 10**9))
    labels = seg * 7919 % 1009  # any labels (not sorted), one per run; neighbours differ
    assert np.array_equal(seg_cumsum(x, seg), _reference(x, seg, np.add))
    assert np.array_equal(seg_cumsum(x, labels), _reference(x, labels, np.add))


def test_empty_input() -> None:
    z = np.zeros(0, dtype=np.int64)
    assert len(seg_cummax(z, z)) == 0 and len(seg_cumsum(z, z)) == 0
