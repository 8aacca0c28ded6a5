"""Interval nesting depth, vectorised: shared by the nsys NVTX reader and the Kineto reader.

Stage: parse. Input: a frame of intervals (start, end, group keys); output: a depth per row.
"""

from __future__ import annotations

import polars as pl


def nesting_depth(df: pl.DataFrame, start: str, end: str, by: list[str]) -> pl.Series:
    """Depth of each interval among the intervals of its group (0 = outermost), vectorised.

    Boundary sweep: +1 at each start, -1 at each end; an interval's depth is the number of
    intervals open just before it starts. Ends sort before starts at the same instant, except
    the end of a zero-length interval (a mark), which follows its own start; starts at the same
    instant open the longer interval first. Unclosed intervals never end.
    """
    if df.height == 0:
        return pl.Series("depth", [], dtype=pl.Int32)
    big = 1 << 62
    idx = pl.arange(0, df.height, eager=True).alias("_i")
    base = df.select(
        *by, pl.col(start).alias("_t0"), pl.col(end).fill_null(big).alias("_t1")
    ).with_columns(idx)
    starts = base.select(
        *by, pl.col("_t0").alias("_t"), pl.lit(1).alias("_kind"),
        (-pl.col("_t1")).alias("_tie"), "_i",
        pl.lit(1).alias("_d"),
    )  # fmt: skip
    ends = base.select(
        *by, pl.col("_t1").alias("_t"),
        pl.when(pl.col("_t1") == pl.col("_t0")).then(2).otherwise(0).alias("_kind").cast(pl.Int32),
        pl.lit(0, pl.Int64).alias("_tie"), "_i", pl.lit(-1).alias("_d"),
    )  # fmt: skip
    ev = pl.concat([starts, ends], how="vertical_relaxed").sort([*by, "_t", "_kind", "_tie"])
    ev = ev.with_columns(pl.col("_d").cum_sum().over(by).alias("_open"))
    depth = (
        ev.filter(pl.col("_kind") == 1)
        .select("_i", (pl.col("_open") - 1).cast(pl.Int32).alias("depth"))
        .sort("_i")
    )
    return depth["depth"]
