"""Segmented scans: running max and running sum that restart at each segment, over numpy arrays.

Stage: none (a numeric leaf). Used by the engine (attribute.py: the running end of a device's
ops, from which idle gaps are measured) and by the replay (the max-plus sweep of each stream's
chain, the host's sync offsets, each device's latest-ending op). It lives at the package's top
level and imports only numpy, so that both may use it while the engine never imports the replay.

Input: int64 values in segment order (each segment contiguous, segment ids non-decreasing);
output: one array of the same length. Exact in int64: no float, no loop per element or segment.
"""

from __future__ import annotations

import numpy as np

__all__ = ["seg_cummax", "seg_cumsum", "seg_starts"]

_LIFT_LIMIT = 1 << 62
"""The lifted values of the one-pass running max stay below this (int64 headroom)."""


def seg_starts(seg: np.ndarray) -> np.ndarray:
    """Boolean mask of the elements that begin a segment (where `seg` changes)."""
    return np.r_[True, seg[1:] != seg[:-1]] if len(seg) else np.zeros(0, dtype=bool)


def seg_cummax(
    x: np.ndarray,
    seg: np.ndarray,
    first: np.ndarray | None = None,
    *,
    overwrite: bool = False,
) -> np.ndarray:
    """Running maximum of int64 `x` that restarts at each segment.

    `seg`: the segment id of each element, non-decreasing (segments contiguous). `first`: where
    each segment begins, as a boolean mask or as indices (computed from `seg` when omitted).
    `overwrite`: `x` is a temporary that may be used as scratch space and returned (saves a copy
    of `x` in the replay's sweep loop).

    One global `np.maximum.accumulate`: each segment's values are lifted above every earlier
    segment's by `seg * span`, so a running max never carries across a boundary. Values below
    every segment's first value cannot be a running max; they are raised to the lowest first
    value, so the span is that of the segments' real values, not of sentinels such as the
    replay's "no release" (-2**40). Where that lift would leave int64, each segment is lifted by
    its own width instead (two more passes).
    """
    if len(x) == 0:
        return x if overwrite else x.copy()
    if first is None:
        first = seg_starts(seg)
    lo = int(x[first].min())
    hi = int(x.max())
    span = max(hi - lo, 0) + 1
    s0, s1 = int(seg[0]), int(seg[-1])
    if span * (s1 - s0 + 1) >= _LIFT_LIMIT or max(-lo, hi) >= _LIFT_LIMIT:
        return _banded_cummax(x, first)
    y = x if overwrite else x.copy()
    np.maximum(y, lo, out=y)
    off = seg.astype(np.int64, copy=True)
    off -= s0
    off *= span
    off -= lo  # y + off = y - lo + (seg - s0) * span: each segment in its own band, all >= 0
    y += off
    np.maximum.accumulate(y, out=y)
    y -= off
    return y


def _banded_cummax(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running max where one span for all segments would leave int64 (absolute times far
    apart, extreme values): each segment lifted by its own width; where even that does not fit
    (values ~2**61 apart: never on real traces), segment by segment."""
    starts = np.flatnonzero(first) if first.dtype == bool else np.asarray(first, dtype=np.int64)
    ends = np.r_[starts[1:], len(x)]
    lo = np.minimum.reduceat(x, starts)
    hi = np.maximum.reduceat(x, starts)
    if float((hi.astype(np.float64) - lo.astype(np.float64) + 1).sum()) < _LIFT_LIMIT / 2:
        width = hi - lo + 1
        band = np.r_[0, np.cumsum(width)[:-1]]
        k = np.repeat(np.arange(len(starts)), ends - starts)
        y = x - lo[k]  # in [0, width): no overflow
        y += band[k]
        np.maximum.accumulate(y, out=y)
        y -= band[k]
        y += lo[k]
        return y
    out = np.empty_like(x)
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        np.maximum.accumulate(x[a:b], out=out[a:b])
    return out


def seg_cumsum(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Inclusive running sum of `x` that restarts wherever `seg` changes (x, seg in one order;
    `seg` any labels, contiguous per segment)."""
    cs = np.cumsum(x)
    if len(x) == 0:
        return cs
    starts = np.flatnonzero(seg_starts(seg))
    before = np.zeros(len(starts), dtype=cs.dtype)  # the sum up to each segment's start
    before[1:] = cs[starts[1:] - 1]
    out: np.ndarray = cs - np.repeat(before, np.diff(starts, append=len(x)))
    return out
