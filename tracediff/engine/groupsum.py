"""Group sums of one file's ops by small integer codes: what a polars group-by gives, without
hashing a row of several keys per op.

Stage: none of its own (a helper of the per-file stage, engine/pipeline/reduce.py, and of the
statistics' pivots, engine/statistics/stats.py). Input: key columns (categoricals, enums,
integers; strings, cast to categoricals) and Int64 value columns of equal length; output: one
row per distinct key, the keys gathered from the group's first row (their own dtypes), each
value's sum and the row count (`group_ids`: each row's group instead). Rows come in the order
of the packed codes, not of first appearance (a polars group-by without `maintain_order`
promises no order either).

Each key becomes a code from 0 (a categorical's physical code, an integer less its least value;
null a code of its own; a key spread wider than a few hundred values renumbered densely in the
same order first) and the codes are packed into one int64, made dense again (a table over the
packed range) whenever the next key would take the range past ~4 codes an op; the sums are then
`np.add.at` into one slot per group, exact in int64. An integer key spread wider than that
table, keys whose distinct combinations still overflow it, or a value column with nulls take
`None` back: the caller groups with polars.
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["dense_codes", "distinct_rows", "group_ids", "group_sums"]


_SPARSE = 256  # a key spread wider is renumbered densely first (cheap: one pass over its values)


def _bound(n: int) -> int:
    """The widest code range made dense by a table (memory and time ~ the ops')."""
    return 4 * n + (1 << 16)


def _codes(phys: pl.Series, categorical: bool) -> tuple[np.ndarray, int, int] | None:
    """`phys` (a key's values; a categorical's: its physical codes) as codes 0..width-1 once `lo`
    is taken off: (codes, lo, width). Null is a code of its own (the largest + 1). Values spread
    wider than `_SPARSE` are renumbered densely in the same order (a table where the range is at
    most `_bound`, np.unique beyond, which only a categorical takes: polars 2 keeps one
    categorical mapping a process, so a frame's few names can have codes anywhere in it, near or
    far apart, after other runs were read in the same process). None: an integer spread too wide,
    or unsigned 64-bit."""
    n = len(phys)
    nulls = phys.null_count()
    if nulls == n:  # all null: one code
        return np.zeros(n, np.int8), 0, 1
    arr = phys.to_numpy() if not nulls else phys.drop_nulls().to_numpy()
    if arr.dtype == np.uint64:
        return None
    lo, hi = int(arr.min()), int(arr.max())
    span = hi - lo + 1
    if span <= _SPARSE:
        if nulls:
            arr = phys.fill_null(hi + 1).to_numpy()
        return arr, lo, span + (1 if nulls else 0)
    if span <= _bound(n):
        codes, k = _dense(arr - lo, span)
    elif categorical:
        uniq, codes = np.unique(arr, return_inverse=True)
        k = len(uniq)
    else:
        return None
    if nulls:
        full = np.full(n, k, np.int64)
        full[phys.is_not_null().to_numpy()] = codes
        codes = full
    return codes, 0, k + (1 if nulls else 0)


def _dense(packed: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """`packed` (values in 0..width-1, width at most `_bound`) renumbered 0..k-1 in value
    order, and k."""
    seen = np.zeros(width, bool)
    seen[packed] = True
    place = np.cumsum(seen, dtype=np.int64)
    place -= 1
    return place[packed], int(place[-1]) + 1


def distinct_rows(cols: list[np.ndarray]) -> np.ndarray:
    """The distinct rows of integer key columns, sorted ([k x columns]): of two non-negative
    columns under 2^31 (process and thread ids, device and cycle), one packed int64 unique
    (~20x a row unique)."""
    if len(cols) == 1:
        return np.unique(cols[0])[:, None]
    if len(cols) == 2 and all(c.min() >= 0 and c.max() < 1 << 31 for c in cols):
        packed = np.unique((cols[0] << 31) | cols[1])
        return np.stack([packed >> 31, packed & ((1 << 31) - 1)], axis=1)
    return np.unique(np.stack(cols, axis=1), axis=0)


def dense_codes(values: np.ndarray, top: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Non-negative integers (a categorical's physical codes, packed keys) as codes 0..k-1 in
    value order, the first row of each code and k: `np.unique(values, return_index=True,
    return_inverse=True)`, by a table over the values' range where it is at most `_bound` (the
    process's category ids: 0.036 -> 0.006 CPU-s at 954 k ops, against np.unique's sort).
    `top`: the table's size where the caller has bounded the values (all below it) itself."""
    n = len(values)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    if top is None:
        top = int(values.max()) + 1
        if top > _bound(n):
            _, first, codes = np.unique(values, return_index=True, return_inverse=True)
            return codes.ravel().astype(np.int64), first, len(first)
    # one scatter finds the values present and their first rows, and the same table then holds
    # their codes (no seen table and no second scatter of the codes: 0.059 against 0.078 CPU-s
    # at 5 M rows)
    at = np.full(top, n, np.int64)
    at[values[::-1]] = np.arange(n - 1, -1, -1)  # repeated places: the last write, the first row
    present = np.flatnonzero(at < n)
    first = at[present]
    at[present] = np.arange(len(present))
    return at[values], first, len(present)


def _empty(
    frame: pl.DataFrame, keys: list[str], values: dict[str, str], count: str
) -> pl.DataFrame:
    """No group: the key columns' dtypes, the sums' and the count's (Int64)."""
    return (
        frame.select(keys)
        .clear()
        .with_columns(
            *(pl.Series(name, [], pl.Int64) for name in values), pl.Series(count, [], pl.Int64)
        )
    )


def group_ids(
    frame: pl.DataFrame, keys: list[str], where: pl.Expr | None = None
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray | None] | None:
    """Each row's group of `keys` (0..k-1, in packed-code order), the first row of each group and
    k; with `where`, of the rows it keeps only (their indexes, the 4th item; else None). String
    keys are cast to the process's categorical mapping first (one hash a value, not a row of
    keys). None where the codes do not fit (module doc)."""
    n = frame.height
    # the keys' physical codes and the rows kept: one query (a query per key cost ~0.1 ms each)
    schema = frame.schema  # (built anew at each `frame.schema`: a dtype object per column)
    text = {k for k in keys if schema[k] == pl.String}
    cat = {k: k in text or isinstance(schema[k], (pl.Categorical, pl.Enum)) for k in keys}
    keep = [] if where is None else [where.fill_null(False).alias("_keep")]

    def physical(k: str) -> pl.Expr:
        col = pl.col(k).cast(pl.Categorical) if k in text else pl.col(k)
        return col.to_physical() if cat[k] else col

    phys = frame.select(*(physical(k) for k in keys), *keep)
    coded = []
    for key in keys:
        got = _codes(phys[key], cat[key])
        if got is None:
            return None
        coded.append(got)
    # the narrow keys first: what is packed is made dense while its table is small; each
    # key's values added in place (no int64 copy of a key)
    coded.sort(key=lambda c: c[2])
    packed = np.zeros(n, np.int64)
    width = 1
    for arr, lo, w in coded:
        if w == 1:  # one value: nothing to tell apart
            continue
        if width * w > n and width > 1:
            packed, width = _dense(packed, width)
        if width * w > _bound(n):
            return None
        packed *= w
        packed += arr
        packed -= lo
        width *= w
    rows = None
    if where is not None:
        rows = np.flatnonzero(phys["_keep"].to_numpy())
        packed = packed[rows]
        if len(rows) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 0, rows
    group, first, k = dense_codes(packed, width)
    return group, first, k, rows


def group_sums(
    frame: pl.DataFrame,
    keys: list[str],
    values: dict[str, str],
    count: str,
    where: pl.Expr | None = None,
) -> pl.DataFrame | None:
    """`frame.filter(where).group_by(keys).agg(col(v).sum().alias(name) for name, v in values,
    len())` with the count as Int64 `count`: the key columns, then the sums (Int64), then the
    count. The codes are made over all rows and only they are filtered (not the frame). None
    where the codes do not fit (module doc); no row (none left by `where`): no group."""
    n = frame.height
    if n == 0:
        return _empty(frame, keys, values, count)
    vals = []
    for v in values.values():
        col = frame[v]
        if col.null_count() or col.dtype != pl.Int64:
            return None
        vals.append(col.to_numpy())
    got = group_ids(frame, keys, where)
    if got is None:
        return None
    group, first, k, rows = got
    if rows is not None:
        vals = [arr[rows] for arr in vals]
        if len(rows) == 0:
            return _empty(frame, keys, values, count)
    # frames put together by indexing and hstack, not select / with_columns: no query plan
    # each (~0.1 ms apiece, the cost of a group-by of a few thousand ops)
    out = frame[keys][first if rows is None else rows[first]]
    sums = []
    for name, arr in zip(values, vals, strict=True):
        total = np.zeros(k, np.int64)
        np.add.at(total, group, arr)
        sums.append(pl.Series(name, total))
    counts = np.bincount(group, minlength=k).astype(np.int64)
    return out.hstack([*sums, pl.Series(count, counts)])
