"""The launch join (GPU op → launching API call) against a plain polars hash join: ids repeated
within a process (the general path), ids unique per process (the direct key -> row table), and
sparse or repeated ids (the sorted search)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.parse.nsys.tables import LaunchIndex, launch_join

ON = ["globalPid", "correlationId"]


def _join(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    return launch_join(ops, LaunchIndex(keys))


def _reference(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """The semantics: left join on (process, id); a pair seen twice keeps its first row."""
    first = keys.unique(subset=ON, keep="first", maintain_order=True)
    return ops.join(first, on=ON, how="left", maintain_order="left")


def _nulls(df: pl.DataFrame, col: str, every: int, at: int) -> pl.DataFrame:
    """`df` with `col` null in the rows i with i % every == at."""
    return df.with_columns(
        pl.when(pl.int_range(pl.len()) % every == at).then(None).otherwise(col).alias(col)
    )


def _calls(rng: np.random.Generator, pid: np.ndarray, corr: np.ndarray) -> pl.DataFrame:
    """Launch calls (the API side) of these processes and ids."""
    n = len(pid)
    return pl.DataFrame(
        {
            "globalPid": pid,
            "correlationId": corr,
            "launch_thread_id": rng.integers(0, 9, n),
            "_launch_name": rng.integers(0, 50, n),
            "launch_start_ns": np.arange(n),
            "launch_end_ns": np.arange(n) + 5,
        }
    )


def _ops(pid: np.ndarray, corr: np.ndarray) -> pl.DataFrame:
    """GPU ops of these processes and ids, some ids null."""
    ops = pl.DataFrame({"globalPid": pid, "correlationId": corr, "start": np.arange(len(pid))})
    return _nulls(ops, "correlationId", 31, 5)


def _repeated_ids(seed: int, procs: int, n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    rng = np.random.default_rng(seed)
    pids = (np.arange(procs) + 4000) << 24
    kp = rng.choice(pids, n)
    kc = rng.integers(1, n // 2 + 2, n)  # duplicates within a process
    keys = _nulls(_calls(rng, kp, kc), "globalPid", 97, 3)  # a few of an unknown thread
    m = n + 7
    ops = _ops(
        np.concatenate([rng.choice(pids, m - 2), [99 << 24, pids[0]]]),
        np.concatenate([rng.integers(-3, n // 2 + 9, m - 2), [1, 1 << 40]]),
    )
    return ops, keys


def _unique_ids(seed: int, procs: int, n: int, spread: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Launch calls with ids unique per process (as nsys numbers them), `spread` id values per
    call; ops that hit, miss (unknown id, unknown process, null, negative, out of range)."""
    rng = np.random.default_rng(seed)
    pids = (np.arange(procs) + 4000) << 24
    kp = rng.choice(pids, n)
    kc = np.empty(n, np.int64)
    for p in pids:  # unique ids within each process, from 1 up
        m = kp == p
        kc[m] = np.sort(rng.choice(np.arange(1, spread * n // procs + 2), m.sum(), replace=False))
    keys = _nulls(_calls(rng, kp, kc), "correlationId", 89, 7)  # calls without an id never match
    m = n + 5
    hit = rng.integers(0, n, m - 5)
    ops = _ops(
        np.concatenate([kp[hit], [99 << 24, pids[0], pids[-1], pids[0], 0]]),
        np.concatenate([kc[hit] + (hit % 13 == 0), [1, 1 << 40, -2, 0, 5]]),
    )
    return ops, keys


@pytest.mark.parametrize(("seed", "procs"), [(0, 1), (1, 2), (2, 8), (3, 300)])
def test_launch_join_matches_hash_join(seed: int, procs: int) -> None:
    ops, keys = _repeated_ids(seed, procs, 5000)
    assert_frame_equal(_join(ops, keys), _reference(ops, keys))
    # the API table in (process, id) order, as nsys writes it per process
    keys = keys.sort("correlationId", maintain_order=True)
    assert_frame_equal(_join(ops, keys), _reference(ops, keys))


def test_launch_join_empty_sides_and_unpackable_ids() -> None:
    ops, keys = _repeated_ids(4, 3, 200)
    assert_frame_equal(_join(ops.clear(), keys), _reference(ops.clear(), keys))
    assert_frame_equal(_join(ops, keys.clear()), _reference(ops, keys.clear()))
    none = ops.with_columns(pl.lit(None, pl.Int64).alias("correlationId"))  # nothing matches
    assert_frame_equal(_join(none, keys), _reference(none, keys))
    big = keys.with_columns(pl.col("correlationId") + (1 << 61))  # too wide to pack: hash join
    assert_frame_equal(_join(ops, big), _reference(ops, big))


@pytest.mark.parametrize(("seed", "procs"), [(0, 1), (1, 2), (2, 8), (3, 300)])
def test_direct_table_matches_hash_join(seed: int, procs: int) -> None:
    ops, keys = _unique_ids(seed, procs, 4000, spread=3)
    index = LaunchIndex(keys)
    assert index.table is not None  # this is the path under test
    out = launch_join(ops, index)
    assert_frame_equal(out, _reference(ops, keys))
    assert 0 < out["launch_start_ns"].null_count() < out.height  # some miss, most hit


def test_sparse_or_repeated_ids_use_the_sorted_search() -> None:
    ops, keys = _unique_ids(5, 2, 3000, spread=3)
    sparse = keys.with_columns(pl.col("correlationId") * 10_000)
    index = LaunchIndex(sparse)
    assert index.table is None and index.sorted is not None
    assert_frame_equal(launch_join(ops, index), _reference(ops, sparse))
    twice = pl.concat([keys, keys.with_columns(pl.col("launch_start_ns") + 10**9)])
    index = LaunchIndex(twice)  # an id seen twice in a process: the first call is kept
    assert index.table is None
    assert_frame_equal(launch_join(ops, index), _reference(ops, twice))


@pytest.mark.parametrize("repeat", [False, True])
def test_keys_in_order_use_the_sorted_search_without_a_table(repeat: bool) -> None:
    """One process, its calls in id order (the usual report): no key -> row table is filled;
    an id seen twice still matches its first call."""
    rng = np.random.default_rng(6)
    n = 3000
    kc = np.sort(rng.choice(np.arange(1, 3 * n), n, replace=not repeat))
    keys = _calls(rng, np.full(n, 4000 << 24), kc)
    ops = _ops(np.full(n + 2, 4000 << 24), np.concatenate([rng.choice(kc, n), [0, 3 * n + 5]]))
    index = LaunchIndex(keys)
    assert index.table is None and index.sorted is not None and index.order is None
    assert_frame_equal(launch_join(ops, index), _reference(ops, keys))
