"""A run's collective rows summed where it is reduced (engine/pipeline/collsum.py): the waits
for the last rank of each instance, the critical GPU's rows, the sums per kernel name and GPU
and the instances, the same as windows over every row of the run give (issue 32: the Dask
driver held every rank's row of every instance until its join)."""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.engine.pipeline import collsum


def _coll(seed: int, devices: int = 5, cycles: int = 7, k: int = 3) -> pl.DataFrame:
    """One run's collective rows; some ranks skip an instance (one rank left: no wait), starts
    before and after each other (waits clipped at 0 and at the duration), two kernel names."""
    rng = np.random.default_rng(seed)
    rows = [
        (c, d, j)
        for d in range(devices)
        for c in range(cycles)
        for j in range(k)
        if not (j == 2 and d and c % 3 == 0)  # instance (c, 2) of such cycles: one rank
    ]
    n = len(rows)
    return pl.DataFrame(
        {
            "cycle": [r[0] for r in rows],
            "device_id": pl.Series([r[1] for r in rows], dtype=pl.Int32),
            "k": [r[2] for r in rows],
            "kind": pl.Series(["collective"] * n, dtype=pl.Categorical),
            "contributor": pl.Series([f"nccl{r[2] % 2}" for r in rows], dtype=pl.Categorical),
            "phase": pl.Series(["(cycle)"] * n, dtype=pl.Categorical),
            "name": pl.Series([f"ncclKernel{r[2] % 2}" for r in rows], dtype=pl.Categorical),
            "bytes": [1 << (10 + r[2] % 2) for r in rows],
            "start_ns": rng.integers(0, 50_000, n),
            "duration_ns": rng.integers(1, 30_000, n),
        }
    )


def _cyc(coll: pl.DataFrame, seed: int) -> pl.DataFrame:
    """Each device's span per cycle; ties in the end broken by the span, then the device."""
    rng = np.random.default_rng(seed + 100)
    keys = coll.select("cycle", "device_id").unique().sort("cycle", "device_id")
    n = keys.height
    return keys.with_columns(
        pl.Series("start_ns", rng.integers(0, 3, n)),
        pl.Series("end_ns", rng.integers(10, 13, n)),  # many ties
    )


def _windows(coll: pl.DataFrame) -> pl.DataFrame:
    """The wait of every row by windows over the instances (cycle, k)."""
    last = pl.col("start_ns").max().over("cycle", "k")
    wait = pl.min_horizontal(pl.col("duration_ns"), (last - pl.col("start_ns")).clip(0))
    return coll.with_columns(
        pl.when(pl.len().over("cycle", "k") >= 2).then(wait).cast(pl.Int64).alias("wait_ns")
    )


def _critical(cyc: pl.DataFrame) -> pl.DataFrame:
    """cycle, device_id of the device that finished each cycle last (join.cycles_of's rule)."""
    return (
        cyc.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"))
        .sort("cycle", "end_ns", "span_ns", "device_id", descending=[False, True, True, False])
        .group_by("cycle", maintain_order=True)
        .first()
        .select("cycle", "device_id")
    )


def _sorted(f: pl.DataFrame, *by: str) -> pl.DataFrame:
    return f.sort(*by).select(sorted(f.columns))


def test_a_run_summed_whole_or_held_per_rank_file_is_its_rows_summed() -> None:
    for seed in range(5):
        coll = _coll(seed)
        cyc = _cyc(coll, seed)
        rows = _windows(coll)
        w = rows["wait_ns"]
        assert w.null_count() == 3  # the one-rank instances (cycles 0, 3, 6)
        assert (w.drop_nulls() == 0).any() and (w.drop_nulls() > 0).any()
        crit = rows.join(_critical(cyc), on=["cycle", "device_id"], how="semi")
        sums = rows.group_by("name", "bytes", "device_id").agg(
            pl.col("duration_ns").sum().alias("t"),
            pl.col("wait_ns").sum().alias("w"),
            pl.col("wait_ns").count().alias("nw"),
        )
        per_file = [coll.filter(pl.col("device_id") == d) for d in range(5)]
        for got in (collsum.summed(coll, cyc), _held(per_file, cyc)):
            key = ("cycle", "device_id", "k")
            assert _sorted(got.crit, *key).equals(_sorted(crit, *key))
            assert got.crit.select("cycle").n_unique() == 7  # one GPU's rows per cycle
            by = ("name", "bytes", "device_id")
            assert _sorted(got.sums, *by).equals(_sorted(sums, *by))
            assert got.inst.height == 7 * 3
            assert got.inst.filter(pl.col("_ranks") == 1).height == 3


def test_a_sparse_instance_index_gives_the_same_waits() -> None:
    """k far apart (no dense index): the join on the instances instead."""
    coll = _coll(1).with_columns(
        pl.when(pl.col("k") == 1).then(10**9).otherwise(pl.col("k")).alias("k")
    )
    inst = coll.group_by("cycle", "k").agg(
        pl.col("start_ns").max().alias("_last"), pl.len().alias("_ranks")
    )
    assert collsum._dense_index(coll, inst) is None
    assert collsum.waits(coll, inst).equals(_windows(coll))
    dense = _coll(1)
    inst = dense.group_by("cycle", "k").agg(
        pl.col("start_ns").max().alias("_last"), pl.len().alias("_ranks")
    )
    assert collsum._dense_index(dense, inst) is not None
    assert collsum.waits(dense, inst).equals(_windows(dense))


def test_no_collective_rows_sum_to_nothing() -> None:
    got = collsum.summed(_coll(0).clear(), pl.DataFrame())
    assert got.crit.height == got.sums.height == got.inst.height == 0


def _held(frames: list[pl.DataFrame], cyc: pl.DataFrame) -> collsum.Summed:
    """The frames summed as a run of rank files' driver holds them (rankmerge.Leaders: each
    file held as it comes back, its wide rows kept for devices that can still lead)."""
    holding = collsum.Holding()
    if cyc.height == 0:
        return holding.summed([holding.held(f, lambda f: f) for f in frames], cyc)
    lead = collsum.leading(cyc).select("cycle", "device_id")

    def keep(rows: pl.DataFrame) -> pl.DataFrame:
        keys = lead.with_columns(pl.col("device_id").cast(rows.schema["device_id"]))
        return rows.join(keys, on=["cycle", "device_id"], how="semi", maintain_order="left")

    held = [holding.held(f, keep) for f in frames]
    return holding.summed(held, cyc)


def test_rows_held_narrow_file_by_file_sum_as_the_whole_rows() -> None:
    """The driver's held rows (24 bytes a row: 32-bit cycle, k and duration, a code for the
    name, bytes and GPU) give the same crit rows, sums and instances, in the same order, as the
    files' whole rows; a file of no rows, a null name and a duration past 32 bits included."""
    for seed in range(4):
        coll = _coll(seed)
        if seed == 1:  # a null kernel name (its own group) and a 3 s collective
            coll = coll.with_columns(
                pl.when(pl.col("k") == 0).then(None).otherwise(pl.col("name")).alias("name"),
                pl.when(pl.col("cycle") == 2).then(3 * 10**9).otherwise(pl.col("duration_ns"))
                .alias("duration_ns"),
            )  # fmt: skip
        cyc = _cyc(coll, seed)
        per_file = [coll.filter(pl.col("device_id") == d) for d in range(5)]
        per_file.insert(2, coll.clear())
        want, got = collsum.summed(pl.concat(per_file), cyc), _held(per_file, cyc)
        assert got.crit.equals(want.crit) and got.crit.schema == want.crit.schema
        by = ("name", "bytes", "device_id")
        assert _sorted(got.sums, *by).equals(_sorted(want.sums, *by))
        assert got.sums.schema == want.sums.schema
        assert _sorted(got.inst, "cycle", "k").equals(_sorted(want.inst, "cycle", "k"))
        assert got.inst.schema == want.inst.schema
    assert _held([_coll(0).clear()], pl.DataFrame()).sums.height == 0


def test_held_rows_are_narrow_where_their_values_fit() -> None:
    holding = collsum.Holding()
    coll = _coll(2)
    wide = coll.with_columns(pl.lit(5 * 10**9).alias("duration_ns"))
    a, b = holding.held(coll, lambda f: f), holding.held(wide, lambda f: f.clear())
    assert a.rows.schema["duration_ns"] == a.rows.schema["cycle"] == pl.Int32
    assert b.rows.schema["duration_ns"] == pl.Int64 and b.rows.schema["k"] == pl.Int32
    assert b.wide.height == 0 and a.groups.height == 2 * 5  # two (name, bytes) on each GPU
