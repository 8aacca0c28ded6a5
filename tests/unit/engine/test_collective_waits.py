"""The wait for the last rank of each collective instance (engine/pipeline/join.py
`collective_waits`), computed by a dense index of the instances where it is dense: the same
values as the windows over the rows (issue 32, the Dask driver's join at 512 ranks a side)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.engine.cycle.sequences import SIDES
from tracediff.engine.pipeline.join import _dense_waits, collective_waits


def _coll(seed: int, devices: int = 5, cycles: int = 7, k: int = 3) -> pl.DataFrame:
    """Instances of both sides; some ranks skip an instance (one rank left: no wait), starts
    before and after each other (waits clipped at 0 and at the duration)."""
    rng = np.random.default_rng(seed)
    rows = [
        (s, c, d, j)
        for s in ("base", "head")
        for d in range(devices)
        for c in range(cycles)
        for j in range(k)
        if not (j == 2 and d and c % 3 == 0)  # instance (c, 2) of such cycles: one rank
    ]
    n = len(rows)
    return pl.DataFrame(
        {
            "side": pl.Series([r[0] for r in rows], dtype=SIDES),
            "cycle": [r[1] for r in rows],
            "device_id": pl.Series([r[2] for r in rows], dtype=pl.Int32),
            "k": [r[3] for r in rows],
            "start_ns": rng.integers(0, 50_000, n),
            "duration_ns": rng.integers(1, 30_000, n),
        }
    )


def _windows(coll: pl.DataFrame, ndev: int) -> pl.DataFrame:
    """The windows' answer: the same frame with `side` as text (no dense index for it)."""
    plain = coll.with_columns(pl.col("side").cast(pl.String))
    return collective_waits(plain, ndev).with_columns(pl.col("side").cast(SIDES))


def test_dense_waits_are_the_windows_waits() -> None:
    for seed in range(5):
        coll = _coll(seed)
        assert _dense_waits(coll) is not None
        got = collective_waits(coll, 5)
        want = _windows(coll, 5)
        assert got.equals(want)
        w = got["wait_ns"]
        assert w.null_count() == 2 * 3  # the one-rank instances, on both sides
        assert (w.drop_nulls() == 0).any() and (w.drop_nulls() > 0).any()
        assert (w.drop_nulls() <= got.filter(w.is_not_null())["duration_ns"]).all()


def test_a_sparse_index_falls_back_to_the_windows() -> None:
    coll = _coll(1).with_columns(
        pl.when(pl.col("k") == 1).then(10**9).otherwise(pl.col("k")).alias("k")
    )
    assert _dense_waits(coll) is None
    assert collective_waits(coll, 5).equals(_windows(coll, 5))
