"""engine/statistics/stats.py `_pivot`: the per-contributor matrices and counts from key codes
give the statistics the polars joins give (its fallback), row for row and bit for bit: keys with
nulls, string and integer keys, cycles a side does not list, lists out of order or with gaps."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracediff.engine.statistics import stats as st

KEYS = ["kind", "name", "phase", "device_id"]


def _long(seed: int, rows: int = 3000) -> pl.DataFrame:
    g = np.random.default_rng(seed)
    names = [f"kernel_{i}" for i in range(40)] + ["nccl:all_reduce [transfer]"]
    phase = g.choice(np.array(["draft", "verify", None], dtype=object), rows).tolist()
    device = [
        None if r < 0.05 else int(d)
        for r, d in zip(g.random(rows), g.integers(0, 4, rows), strict=True)
    ]
    return pl.DataFrame(
        {
            "side": g.choice(["base", "head"], rows),
            "cycle": g.integers(0, 60, rows),
            "kind": g.choice(["kernel", "gap", "memcpy"], rows),
            "name": g.choice(names, rows),
            "phase": pl.Series(phase, dtype=pl.String),
            "device_id": pl.Series(device, dtype=pl.Int32),
            "value_ns": g.integers(-5_000, 2_000_000, rows),
            "count": g.integers(1, 4, rows),
        }
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("keys", [KEYS, ["phase"], ["kind", "name", "phase"]])
@pytest.mark.parametrize("scale", [1, 10**9])  # 10**9: too far apart for a table, searched
def test_codes_give_what_the_joins_give(
    seed: int, keys: list[str], scale: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    long = _long(seed).with_columns(pl.col("cycle") * scale)
    g = np.random.default_rng(seed + 10)
    cb = sorted((g.choice(60, 45, replace=False) * scale).tolist())  # some cycles not listed
    ch = (g.permutation(np.arange(5, 58)) * scale).tolist()  # out of order
    fast = st.per_cycle_stats(long, keys, cb, ch, 200, counts=True)
    assert st._pivot(long, keys, cb, ch, True) is not None  # the codes' path was taken
    monkeypatch.setattr(st, "_pivot", lambda *a: None)
    slow = st.per_cycle_stats(long, keys, cb, ch, 200, counts=True)
    assert_frame_equal(fast.select(slow.columns), slow)
    assert fast["_cb"].null_count() + fast["_ch"].null_count() > 0 or len(keys) == 1


def test_a_cycle_listed_twice_takes_the_joins() -> None:
    long = _long(3)
    assert st._pivot(long, KEYS, [0, 1, 1, 2], list(range(60)), False) is None
    assert st._pivot(long, KEYS, [0, 1, 2], [10**12, 7, 10**12], False) is None  # by search
