"""Arrow columns to and from polars without pyarrow.compute: the readers' string conversions.

Stage: runs (a helper of the readers, parse/nsys and parse/nccl.py, and of schema.conform).
Why: pyarrow's `Array.cast` and `dictionary_encode`, and polars' Series-from-Arrow path, import
pyarrow.compute, whose import builds ~290 Python wrappers: ~37 CPU-ms of every command that
reads an nsys export (x500 `.sqlite` compare: ~1.6 % of its CPU), for casts of a few thousand
strings. Here the same arrays are made from the buffers (`narrow`), by polars (`series`,
`encoded`), equal to what those calls give. Where pyarrow.compute is loaded already, or a
column is long (`LONG` rows: its encoder is ~2x this one's, ~8 against ~15 ms at 600 k rows),
Arrow encodes it (`arrow_pays`).
"""

from __future__ import annotations

import sys

import numpy as np
import polars as pl
import pyarrow as pa

__all__ = ["arrow_pays", "encoded", "narrow", "series"]

LONG = 1 << 18
"""Rows from which a column is encoded by Arrow even where that imports pyarrow.compute."""

DICT_STRING = pa.dictionary(pa.int32(), pa.string())
"""The run files' dictionary-encoded strings (names of kernels, APIs, ranges)."""


def arrow_pays(rows: int) -> bool:
    """Whether Arrow's own encoder should encode `rows` strings (module doc)."""
    return rows >= LONG or "pyarrow.compute" in sys.modules


def series(values: pa.Array | pa.ChunkedArray) -> pl.Series:
    """An Arrow array as an unnamed polars Series (a dictionary array as Categorical), by way of
    a one-column table: polars' Series-from-Arrow path imports pyarrow.compute, this does not."""
    return pl.DataFrame(pa.table({"": values})).to_series()


def narrow(values: pa.Array) -> pa.Array:
    """A `large_string` array as `string` (32-bit offsets, as polars' strings are exported wide):
    the same validity and characters, its offsets narrowed by numpy. Other types, or 2 GiB of
    characters and more, are cast by Arrow (which refuses the latter)."""
    if values.type != pa.large_string():
        return values if values.type == pa.string() else values.cast(pa.string())
    validity, offsets, data = values.buffers()
    wide = np.frombuffer(offsets, np.int64, values.offset + len(values) + 1)
    if int(wide[-1]) >= 1 << 31:
        return values.cast(pa.string())
    return pa.Array.from_buffers(
        pa.string(),
        len(values),
        [validity, pa.py_buffer(wide.astype(np.int32)), data],
        values.null_count,
        values.offset,
    )


def encoded(values: pl.Series | pa.Array) -> pa.DictionaryArray:
    """Strings (polars', or an Arrow string array) as `dictionary<int32, string>`, the values in
    the order they first occur and a null a null index: what Arrow's `dictionary_encode` gives
    (and gives here, where it pays)."""
    if arrow_pays(len(values)):
        arrow = values if isinstance(values, pa.Array) else values.cast(pl.String).to_arrow()
        return narrow(arrow).dictionary_encode()
    text = (series(values) if isinstance(values, pa.Array) else values).cast(pl.String)
    distinct = text.drop_nulls().unique(maintain_order=True)
    codes = pl.DataFrame(
        {"v": distinct, "i": pl.int_range(len(distinct), dtype=pl.Int32, eager=True)}
    )
    index = pl.DataFrame({"v": text}).join(codes, on="v", how="left", maintain_order="left")["i"]
    indices = pa.array(index.to_numpy(), pa.int32()) if not index.null_count() else index.to_arrow()
    return pa.DictionaryArray.from_arrays(indices, narrow(distinct.to_arrow()))
