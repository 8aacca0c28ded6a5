"""Column helpers for the nsys table builders: StringIds as a dictionary, enum labels,
globalTid/globalPid split, and assembly of a run-file table in its exact schema.

Stage: parse (nsys). Input: polars columns of raw nsys tables; output: Arrow arrays and tables
of `tracediff.runs.schema`. Names stay dictionary-encoded by id (no per-row string is built).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.parse.nsys.schema import TID_BITS
from tracediff.runs import schema
from tracediff.runs.arrowcols import encoded, narrow, series


class Strings:
    """StringIds as the dictionary of name columns. Ids may be sparse (sliced exports)."""

    def __init__(self, df: pl.DataFrame, values: pa.Array | None = None) -> None:
        df = df.filter(pl.col("id").is_not_null()).unique("id", keep="first").sort("id")
        self.ids = df["id"].to_numpy()
        self.values = values if values is not None else narrow(df["value"].to_arrow())
        n = len(self.ids)
        self.dense = n == 0 or (self.ids[0] == 0 and self.ids[-1] == n - 1)
        self.missing = 0  # ids referenced by events but absent from StringIds
        self.rows = self._rows()

    def with_values(self, values: pa.Array) -> Strings:
        other = Strings.__new__(Strings)
        other.ids, other.values, other.dense, other.missing = self.ids, values, self.dense, 0
        other.rows = self.rows
        return other

    def _rows(self) -> np.ndarray | None:
        """Sparse ids over a small range (1..17 where nsys numbers from 1): each id's row by a
        table over the range (-1: no such id), read once a name where a binary search of 5 M
        names cost 13-100 ms a column (8 GPUs); None where the ids are dense or spread wide."""
        n = len(self.ids)
        if self.dense or self.ids[0] < 0 or self.ids[-1] > 4 * n + (1 << 16):
            return None
        rows = np.full(int(self.ids[-1]) + 1, -1, np.int64)
        rows[self.ids] = np.arange(n)
        return rows

    def _positions(self, ids: pl.Series) -> tuple[np.ndarray, np.ndarray]:
        """Each id's row in the table and whether it is there (the slow path of `lookup`);
        the ids not there but not null are counted into `missing`."""
        n = len(self.ids)
        nulls = ids.is_null().to_numpy()
        vals = ids.cast(pl.Int64).fill_null(-1).to_numpy()
        if self.dense:
            pos = vals
            found = (vals >= 0) & (vals < n)
        elif self.rows is not None:
            inside = (vals >= 0) & (vals < len(self.rows))
            pos = self.rows[np.where(inside, vals, 0)]
            found = inside & (pos >= 0)
        elif n:
            pos = np.minimum(np.searchsorted(self.ids, vals), n - 1)
            found = self.ids[pos] == vals
        else:
            pos, found = vals, np.zeros(len(vals), dtype=bool)
        self.missing += int((~found & ~nulls).sum())
        return pos, found

    def _all_known(self, ids: pl.Series) -> bool:
        """The common case: every id known, and ids are positions already."""
        n = len(self.ids)
        return bool(
            self.dense and len(ids) and ids.null_count() == 0 and ids.min() >= 0 and ids.max() < n  # type: ignore[operator]
        )

    def lookup(self, ids: pl.Series) -> pa.DictionaryArray:
        if self._all_known(ids):
            idx = ids.cast(pl.Int32).to_arrow()
            return pa.DictionaryArray.from_arrays(  # bounds checked: no index scan
                idx.combine_chunks() if isinstance(idx, pa.ChunkedArray) else idx,
                self.values,
                safe=False,
            )
        pos, found = self._positions(ids)
        idx = pa.array(np.where(found, pos, 0).astype(np.int32), mask=~found)
        return pa.DictionaryArray.from_arrays(idx, self.values)

    def count_missing(self, ids: pl.Series) -> None:
        """Count into `missing` the ids `lookup(ids)` would find absent, building nothing."""
        if not self._all_known(ids):
            self._positions(ids)

    def strings(self, ids: pl.Series) -> pl.Series:
        return series(self.lookup(ids)).cast(pl.String)


def label_column(codes: pl.Series, labels: dict[int, str]) -> pa.DictionaryArray:
    names = sorted(set(labels.values()))
    pos = {k: names.index(v) for k, v in labels.items()}
    idx = codes.replace_strict(pos, default=None, return_dtype=pl.Int32)
    return pa.DictionaryArray.from_arrays(idx.to_arrow(), pa.array(names, pa.string()))


def code_column(codes: pl.Series, names: list[str]) -> pa.DictionaryArray:
    """Small int codes → dictionary column over `names`."""
    return pa.DictionaryArray.from_arrays(
        codes.cast(pl.Int32).to_arrow(), pa.array(names, pa.string())
    )


_PL_TYPES = {
    pa.int32(): pl.Int32(),
    pa.int64(): pl.Int64(),
    pa.float64(): pl.Float64(),
    pa.string(): pl.String(),
}


def finish(
    table: str, df: pl.DataFrame, dicts: dict[str, pa.Array], only: list[str] | None = None
) -> pa.Table:
    """Assemble `table` in schema order with exact types, so schema.conform has nothing to cast.
    `only`: just these of its columns (the rest of a `Partial` table: runs/deferred.py)."""
    fields = [f for f in schema.TABLES[table] if only is None or f.name in only]
    cols = []
    for f in fields:
        if f.name in dicts:
            a = dicts[f.name]
        elif f.name in df.columns:
            s = df[f.name]
            if pa.types.is_dictionary(f.type):
                a = encoded(s)
            else:
                a = s.cast(_PL_TYPES[f.type]).to_arrow()
        else:
            a = pa.nulls(df.height, f.type)
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        cols.append(
            a if a.type == f.type else narrow(a) if f.type == pa.string() else a.cast(f.type)
        )
    return pa.Table.from_arrays(
        cols, schema=schema.TABLES[table] if only is None else pa.schema(fields)
    )


def pid_of(col: str) -> pl.Expr:
    return ((pl.col(col) // TID_BITS) % TID_BITS).cast(pl.Int64)


def tid_of(col: str) -> pl.Expr:
    return (pl.col(col) % TID_BITS).cast(pl.Int64)


def by_start(df: pl.DataFrame, col: str = "start") -> pl.DataFrame:
    # SQLite ORDER BY costs more than the whole read; nsys tables are mostly in order already
    return df if df[col].is_sorted() else df.sort(col, maintain_order=True)
