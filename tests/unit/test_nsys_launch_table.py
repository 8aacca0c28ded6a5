"""The launch join's direct key -> row table (unique, dense correlation ids) against a hash join."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.parse.nsys.tables import LaunchIndex, _launch_join

ON = ["globalPid", "correlationId"]


def _frames(seed: int, procs: int, n: int, spread: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Launch calls with ids unique per process (as nsys numbers them), `spread` id values per
    call; ops that hit, miss (unknown id, unknown process, null, negative, out of range)."""
    rng = np.random.default_rng(seed)
    pids = (np.arange(procs) + 4000) << 24
    kp = rng.choice(pids, n)
    kc = np.empty(n, np.int64)
    for p in pids:  # unique ids within each process, from 1 up
        m = kp == p
        kc[m] = np.sort(rng.choice(np.arange(1, spread * n // procs + 2), m.sum(), replace=False))
    keys = pl.DataFrame(
        {
            "globalPid": kp,
            "correlationId": kc,
            "launch_thread_id": rng.integers(0, 9, n),
            "_launch_name": rng.integers(0, 50, n),
            "launch_start_ns": np.arange(n),
            "launch_end_ns": np.arange(n) + 5,
        }
    ).with_columns(  # calls without an id never match
        pl.when(pl.int_range(pl.len()) % 89 == 7)
        .then(None)
        .otherwise("correlationId")
        .alias("correlationId")
    )
    m = n + 5
    hit = rng.integers(0, n, m - 5)
    ops = pl.DataFrame(
        {
            "globalPid": np.concatenate([kp[hit], [99 << 24, pids[0], pids[-1], pids[0], 0]]),
            "correlationId": np.concatenate([kc[hit] + (hit % 13 == 0), [1, 1 << 40, -2, 0, 5]]),
            "start": np.arange(m),
        }
    ).with_columns(
        pl.when(pl.int_range(pl.len()) % 31 == 5)
        .then(None)
        .otherwise("correlationId")
        .alias("correlationId")
    )
    return ops, keys


def _reference(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    first = keys.unique(subset=ON, keep="first", maintain_order=True)
    return ops.join(first, on=ON, how="left", maintain_order="left")


@pytest.mark.parametrize(("seed", "procs"), [(0, 1), (1, 2), (2, 8), (3, 300)])
def test_direct_table_matches_hash_join(seed: int, procs: int) -> None:
    ops, keys = _frames(seed, procs, 4000, spread=3)
    index = LaunchIndex(keys)
    assert index.table is not None  # this is the path under test
    out = _launch_join(ops, index)
    assert_frame_equal(out, _reference(ops, keys))
    assert 0 < out["launch_start_ns"].null_count() < out.height  # some miss, most hit


def test_sparse_or_repeated_ids_use_the_sorted_search() -> None:
    ops, keys = _frames(5, 2, 3000, spread=3)
    sparse = keys.with_columns(pl.col("correlationId") * 10_000)
    index = LaunchIndex(sparse)
    assert index.table is None and index.sorted is not None
    assert_frame_equal(_launch_join(ops, index), _reference(ops, sparse))
    twice = pl.concat([keys, keys.with_columns(pl.col("launch_start_ns") + 10**9)])
    index = LaunchIndex(twice)  # an id seen twice in a process: the first call is kept
    assert index.table is None
    assert_frame_equal(_launch_join(ops, index), _reference(ops, twice))
