"""The launch join (GPU op → launching API call) against a plain polars hash join."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.parse.nsys.tables import LaunchIndex
from tracediff.parse.nsys.tables import _launch_join as _join

ON = ["globalPid", "correlationId"]


def _launch_join(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    return _join(ops, LaunchIndex(keys))


def _reference(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """The semantics: left join on (process, id); a pair seen twice keeps its first row."""
    first = keys.unique(subset=ON, keep="first", maintain_order=True)
    return ops.join(first, on=ON, how="left", maintain_order="left")


def _frames(seed: int, procs: int, n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    pids = (np.arange(procs) + 4000) << 24
    kp = rng.choice(pids, n)
    kc = rng.integers(1, n // 2 + 2, n)  # duplicates within a process
    keys = pl.DataFrame(
        {
            "globalPid": kp,
            "correlationId": kc,
            "launch_thread_id": rng.integers(0, 9, n),
            "_launch_name": rng.integers(0, 50, n),
            "launch_start_ns": np.arange(n),
            "launch_end_ns": np.arange(n) + 5,
        }
    ).with_columns(  # a few calls of an unknown thread (null process)
        pl.when(pl.int_range(pl.len()) % 97 == 3)
        .then(None)
        .otherwise("globalPid")
        .alias("globalPid")
    )
    m = n + 7
    ops = pl.DataFrame(
        {
            "globalPid": np.concatenate([rng.choice(pids, m - 2), [99 << 24, pids[0]]]),
            "correlationId": np.concatenate([rng.integers(-3, n // 2 + 9, m - 2), [1, 1 << 40]]),
            "start": np.arange(m),
        }
    ).with_columns(
        pl.when(pl.int_range(pl.len()) % 31 == 5)
        .then(None)
        .otherwise("correlationId")
        .alias("correlationId")
    )
    return ops, keys


@pytest.mark.parametrize(("seed", "procs"), [(0, 1), (1, 2), (2, 8), (3, 300)])
def test_launch_join_matches_hash_join(seed: int, procs: int) -> None:
    ops, keys = _frames(seed, procs, 5000)
    assert_frame_equal(_launch_join(ops, keys), _reference(ops, keys))
    # the API table in (process, id) order, as nsys writes it per process
    keys = keys.sort("correlationId", maintain_order=True)
    assert_frame_equal(_launch_join(ops, keys), _reference(ops, keys))


def test_launch_join_empty_sides_and_unpackable_ids() -> None:
    ops, keys = _frames(4, 3, 200)
    assert_frame_equal(_launch_join(ops.clear(), keys), _reference(ops.clear(), keys))
    assert_frame_equal(_launch_join(ops, keys.clear()), _reference(ops, keys.clear()))
    none = ops.with_columns(pl.lit(None, pl.Int64).alias("correlationId"))  # nothing matches
    assert_frame_equal(_launch_join(none, keys), _reference(none, keys))
    big = keys.with_columns(pl.col("correlationId") + (1 << 61))  # too wide to pack: hash join
    assert_frame_equal(_launch_join(ops, big), _reference(ops, big))
