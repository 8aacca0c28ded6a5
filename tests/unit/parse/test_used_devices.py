"""parse/ranks/gpus.py `_by_plan`: each device's process is the one with most of its ops (ties:
the lowest id; null ids not counted; none: null), its rank the one rank its collectives carry
(none or several: null), one row per device with any op, in device order. Checked against the
rule written out in Python on tables with several processes, ties, nulls and ranks."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from tracediff.parse.ranks import gpus


def _table(g: np.random.Generator, n: int, ranked: bool) -> pa.Table:
    dev = [
        None if r < 0.03 else int(d) for r, d in zip(g.random(n), g.integers(0, 6, n), strict=True)
    ]
    pid = [
        None if r < 0.1 else int(p)
        for r, p in zip(g.random(n), g.choice([7, 9, 4000], n), strict=True)
    ]
    cols = {"device_id": pa.array(dev, pa.int32()), "process_id": pa.array(pid, pa.int64())}
    if ranked:
        rank = [
            None if r < 0.2 else int(k)
            for r, k in zip(g.random(n), g.integers(0, 2, n), strict=True)
        ]
        cols["rank"] = pa.array(rank, pa.int32())
    return pa.table(cols)


def _rule(tabs: dict[str, pa.Table]) -> list[tuple]:
    pids: dict[int, Counter] = {}
    ranks: dict[int, set] = {}
    for tab in tabs.values():
        rows = tab.to_pylist()
        for r in rows:
            if r["device_id"] is None:
                continue
            c = pids.setdefault(r["device_id"], Counter())
            if r["process_id"] is not None:
                c[r["process_id"]] += 1
            if r.get("rank") is not None:
                ranks.setdefault(r["device_id"], set()).add(r["rank"])
    out = []
    for d in sorted(pids):
        c = pids[d]
        best = min(c, key=lambda p: (-c[p], p)) if c else None
        rk = ranks.get(d, set())
        out.append((d, best, next(iter(rk)) if len(rk) == 1 else None))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_most_frequent_process_and_the_one_rank(seed: int) -> None:
    g = np.random.default_rng(seed)
    small = int(g.integers(1, 40))  # few ops: ties between processes are common
    tabs = {
        "kernels": _table(g, small, False),
        "memops": _table(g, int(g.integers(0, 10)), False),
        "collectives": _table(g, int(g.integers(0, 12)), True),
    }
    got = gpus._by_plan(tabs)
    assert got.rows() == _rule(tabs)
    assert got.schema == {"device_id": pl.Int32, "process_id": pl.Int64, "rank": pl.Int32}
