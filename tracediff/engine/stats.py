"""Per-contributor statistics: per-cycle means of both sides, bootstrap CI, significance.

Stage: engine. Input: a long table (side, cycle, keys..., value_ns); output: one row per key.
Used for the GPU attribution (per GPU and summed over GPUs) and the host phases.
"""

from __future__ import annotations

import polars as pl

from tracediff.engine import attribute as at

ESTIMATE = (
    "base_ms_per_cycle",
    "head_ms_per_cycle",
    "delta_ms_per_cycle",
    "ci95_low",
    "ci95_high",
    "significant",
    "share",
)
"""The estimate columns of every contributor row, in report order (per GPU and summed)."""

BY_CHANGE = [pl.col("delta_ms_per_cycle").abs().neg(), pl.col("_k")]
"""Sort key of contributor rows: largest |change| first, ties in key order (`_k`). Rows of equal
change (every row of two equal runs), and with them the ids c0, c1..., are then in one order by
contract; before, by practice only (polars keeps a one-key sort's ties in input order, unasked)."""

MIN_EFFECT_MS = 0.001
"""Changes below 1 µs per cycle are never called significant, whatever their CI."""
REL_EFFECT = 0.01
"""...nor changes below 1 % of the contributor's own base time per cycle (clock jitter)."""


def _significant() -> pl.Expr:
    # NaN CI (fewer than 2 cycles a side) is never significant; polars orders NaN above every
    # number, so it must be excluded explicitly
    known = pl.col("ci95_low").is_not_nan() & pl.col("ci95_high").is_not_nan()
    excl = known & ((pl.col("ci95_low") > 0) | (pl.col("ci95_high") < 0))
    big = pl.col("delta_ms_per_cycle").abs() >= pl.max_horizontal(
        pl.lit(MIN_EFFECT_MS), REL_EFFECT * pl.col("base_ms_per_cycle").abs()
    )
    return (excl & big).alias("significant")


def share() -> pl.Expr:
    """A contributor's part of all the change: its change over the sum of every row's |change|
    (null when nothing changed). Not over the net change: where rows that grew and rows that
    shrank nearly cancel, the net is near 0 and a share over it is meaningless (a 17 µs copy read
    "-1 %" beside host idle swinging by 2 ms); this way |share| sums to 1 and keeps its sign."""
    total = pl.col("delta_ms_per_cycle").abs().sum()
    return (
        pl.when(total > 0).then(pl.col("delta_ms_per_cycle") / total).otherwise(None).alias("share")
    )


def per_cycle_stats(
    long: pl.DataFrame, keys: list[str], cycles_b: list[int], cycles_h: list[int], n_boot: int
) -> pl.DataFrame:
    """One row per distinct `keys` of `long` (side, cycle, keys..., value_ns), in key order (`_k`):
    base/head ms per cycle (absent cycles count 0), their difference, its bootstrap 95 % CI over
    cycles, and whether it is significant."""
    key_order = (
        long.select(keys)
        .unique()
        .sort(keys)
        .with_row_index("_k")
        .with_columns(pl.col("_k").cast(pl.Int64))
    )
    mb = at.matrix(long, "base", keys, cycles_b, key_order)
    mh = at.matrix(long, "head", keys, cycles_h, key_order)
    lo, hi = at.bootstrap_delta(mb, mh, n_boot)
    bm, hm = mb.mean(axis=1) / 1e6, mh.mean(axis=1) / 1e6
    return key_order.with_columns(
        pl.Series("base_ms_per_cycle", bm),
        pl.Series("head_ms_per_cycle", hm),
        pl.Series("delta_ms_per_cycle", hm - bm),
        pl.Series("ci95_low", lo / 1e6),
        pl.Series("ci95_high", hi / 1e6),
    ).with_columns(_significant())


def across_gpus(
    long: pl.DataFrame,
    attribution: pl.DataFrame,
    cycles_b: list[int],
    cycles_h: list[int],
    n_boot: int,
) -> pl.DataFrame:
    """Contributors summed over GPUs: one row per (kind, name, phase).

    Each cycle is charged to the GPU that finished last, and which GPU that is can change from
    cycle to cycle and between the runs: then an unchanged kernel shows up as a loss on one GPU
    and an equal gain on another, and a real change is spread thin over all of them. Summed over
    GPUs (per cycle, before the bootstrap) those cancel or add up, and the rows still sum to the
    measured change. `top_device_id` says where most of the change sits.
    """
    keys = ["kind", "name", "phase"]
    st = per_cycle_stats(long, keys, cycles_b, cycles_h, n_boot)
    where = (
        # ties (two GPUs with the same change): the lower device id
        attribution.sort(pl.col("delta_ms_per_cycle").abs(), "device_id", descending=[True, False])
        .group_by(keys, maintain_order=True)
        .agg(
            pl.col("device_id").n_unique().alias("devices"),
            pl.col("device_id").first().alias("top_device_id"),
            pl.col("delta_ms_per_cycle").first().alias("top_device_delta_ms_per_cycle"),
        )
    )
    return (
        st.join(where, on=keys, how="left", nulls_equal=True)
        .filter((pl.col("base_ms_per_cycle") != 0) | (pl.col("head_ms_per_cycle") != 0))
        .with_columns(share())
        .sort(BY_CHANGE)
        .select(
            *keys,
            "devices",
            "top_device_id",
            "top_device_delta_ms_per_cycle",
            *ESTIMATE,
        )
    )
