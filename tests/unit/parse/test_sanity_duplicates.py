"""parse/sanity.py's duplicate count against its definition (rows equal to an earlier row):
starts in order without ties, with ties, out of order, and with null starts; in start order
and in a run file's device-major order."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from tracediff.parse.sanity import _duplicates


def _defined(keys: pl.DataFrame) -> int:
    return keys.height - keys.unique().height


def _keys(rng: np.random.Generator, n: int, starts: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "device_id": rng.integers(0, 2, n),
            "stream_id": rng.integers(0, 2, n),
            "start_ns": starts,
            "end_ns": starts + rng.integers(0, 2, n),
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_duplicates_counted_as_defined(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 2000
    distinct = np.cumsum(rng.integers(1, 5, n))  # in order, no start twice
    tied = np.sort(rng.integers(0, n // 3, n))  # in order, many starts shared
    shuffled = rng.permutation(tied)  # out of order
    for starts in (distinct, tied, shuffled, np.array([5]), np.array([], np.int64)):
        keys = _keys(rng, len(starts), starts)
        assert _duplicates(keys) == _defined(keys)
        # a run file's order: by device, start order within each (ties as they came)
        major = keys.with_row_index("_r").sort("device_id", "start_ns", "_r").drop("_r")
        assert _duplicates(major) == _defined(keys)
    # start order across devices, a repeat apart from its first by another device's row
    apart = pl.DataFrame({"device_id": [0, 1, 0], "stream_id": [7, 7, 7],
                          "start_ns": [5, 5, 5], "end_ns": [9, 9, 9]})  # fmt: skip
    assert _duplicates(apart) == _defined(apart) == 1
    # device-major but one device's rows out of start order: hashed, still right
    out = pl.DataFrame({"device_id": [0, 0, 0, 1, 1], "stream_id": [1, 1, 1, 1, 1],
                        "start_ns": [5, 3, 5, 1, 1], "end_ns": [6, 4, 6, 2, 2]})  # fmt: skip
    assert _duplicates(out) == _defined(out) == 2
    keys = _keys(rng, n, tied).with_columns(  # null starts: the hashed count
        pl.when(pl.int_range(pl.len()) % 7 == 0).then(None).otherwise("start_ns").alias("start_ns")
    )
    assert _duplicates(keys) == _defined(keys)
    assert _duplicates(_keys(rng, n, distinct)) == 0
    assert _duplicates(_keys(rng, n, tied)) > 0
