"""engine/pipeline/reduce.py `_collectives`: `k`, the k-th collective of a device's cycle, by
numpy where each (device, cycle) is one run of rows, is what polars' window gives; where a
(device, cycle) comes back after another, the window itself."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.engine.pipeline import reduce

COLS = ["kind", "contributor", "phase", "name", "bytes", "start_ns", "duration_ns"]


def _ops(seed: int, contiguous: bool, n: int = 3000) -> pl.DataFrame:
    g = np.random.default_rng(seed)
    dev = np.sort(g.integers(0, 4, n))
    cyc = np.concatenate([np.sort(g.integers(0, 50, (dev == d).sum())) for d in range(4)])
    if not contiguous:
        cyc = g.permutation(cyc)
    kind = g.choice(["collective", "kernel"], n)
    return pl.DataFrame(
        {
            "cycle": cyc,
            "device_id": pl.Series(dev, dtype=pl.Int32),
            "kind": kind,
            "contributor": g.choice(["a", "b"], n),
            "phase": g.choice(["draft", "verify"], n),
            "name": g.choice(["x", "y"], n),
            "bytes": g.integers(0, 100, n),
            "start_ns": np.arange(n),
            "duration_ns": g.integers(1, 9, n),
        }
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("contiguous", [True, False])
def test_k_is_the_windows(seed: int, contiguous: bool) -> None:
    ops = _ops(seed, contiguous)
    is_coll = pl.col("kind") == "collective"
    k = pl.int_range(pl.len()).over("device_id", "cycle").cast(pl.Int64).alias("k")
    want = ops.filter(is_coll).select("cycle", "device_id", k, *COLS)
    got = reduce._collectives(ops, is_coll)
    assert_frame_equal(got, want)
    assert got["k"].max() > 0
