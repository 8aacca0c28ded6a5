"""Interval nesting depth, vectorised: shared by the nsys NVTX reader and the Kineto reader.

Stage: parse. Input: a frame of intervals (start, end, group keys); output: a depth per row.
"""

from __future__ import annotations

import numpy as np
import polars as pl

_BIG = 1 << 62  # the end of an interval that never ends


def nesting_depth(df: pl.DataFrame, start: str, end: str, by: list[str]) -> pl.Series:
    """Depth of each interval among the intervals of its group (0 = outermost), vectorised.

    Boundary sweep: +1 at each start, -1 at each end; an interval's depth is the number of
    intervals open just before it starts. Ends sort before starts at the same instant, except
    the end of a zero-length interval (a mark), which follows its own start; starts at the same
    instant open the longer interval first, and identical intervals open in row order. Unclosed
    intervals never end.

    One stable numpy sort of the 2n boundaries (61 k NVTX ranges: ~6 ms; the polars plan of
    sort, windowed cumulative sum, filter and sort took ~26 ms).
    """
    n = df.height
    if n == 0:
        return pl.Series("depth", [], dtype=pl.Int32)
    t0 = df[start].cast(pl.Int64).to_numpy()
    t1 = df[end].cast(pl.Int64).fill_null(_BIG).to_numpy()
    g = _groups(df, by)
    t = np.concatenate([t0, t1])
    # boundary kind: 0 an end, 1 a start, 2 the end of a zero-length interval
    kind = np.concatenate([np.ones(n, np.int8), np.where(t1 == t0, 2, 0).astype(np.int8)])
    tie = np.concatenate([-t1, np.zeros(n, np.int64)])  # a longer interval opens first
    gg = None if g is None else np.concatenate([g, g])
    order = np.lexsort((tie, kind, t) if gg is None else (tie, kind, t, gg))  # stable
    is_start = order < n
    opened = np.cumsum(np.where(is_start, 1, -1))
    if gg is not None:  # the count restarts in each group
        gs = gg[order]
        first = np.flatnonzero(np.concatenate([[True], gs[1:] != gs[:-1]]))
        before = np.concatenate([[0], opened[first[1:] - 1]])
        opened -= np.repeat(before, np.diff(np.concatenate([first, [2 * n]])))
    depth = np.empty(n, np.int32)
    depth[order[is_start]] = opened[is_start] - 1
    return pl.Series("depth", depth)


def _groups(df: pl.DataFrame, by: list[str]) -> np.ndarray | None:
    """One int64 code per row naming its group (None: a single group)."""
    cols = [df[c] for c in by]
    if all(c.dtype.is_integer() and not c.null_count() for c in cols):
        code: np.ndarray | None = None
        span = 1
        for c in cols:
            lo, hi = c.min(), c.max()
            assert isinstance(lo, int) and isinstance(hi, int)
            width = hi - lo + 1
            if width == 1:
                continue
            span *= width
            if span >= 1 << 62:
                break
            v = c.cast(pl.Int64).to_numpy() - lo
            code = v if code is None else code * width + v
        else:
            return code
    return df.select(pl.struct(by).rank("dense")).to_series().cast(pl.Int64).to_numpy()
