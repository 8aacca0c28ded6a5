"""Additive attribution of the change in mean cycle GPU span, with bootstrap confidence intervals.

Stage: engine. Input: aligned, cycle-tagged ops of both sides; output: per-cycle metrics and
per-contributor per-cycle values.

For one cycle on one device, with ops sorted by start and `gap_i = max(0, start_i - max(end_<i))`:

    span = Σ durations - overlap + Σ gaps,   overlap = Σ durations - busy  (concurrent streams)

This is an identity, so the mean span of each side, and therefore the change, splits exactly into
per-contributor means: op durations by (phase, kind, name, device), idle gaps by cause, and the
(negative) overlap. Each cycle is charged to its critical device (the GPU that finished last).
On >= 2 GPUs, the k-th collective of a cycle is matched across GPUs and split into waiting for the
last rank to arrive (skew) and transfer.
"""

from __future__ import annotations

import numpy as np
import polars as pl

GAP_CAUSES = {
    "host": "idle: host-bound (launch began after the GPU went idle)",
    "launch": "idle: launch latency (launch call still running)",
    "wait": "idle: waiting on a dependency (launched early, GPU idle)",
    "unknown": "idle: cause unknown (no launch record)",
}


def per_device_cycles(ops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(ops with gap_ns/gap_cause, cycles: side, cycle, device_id, start_ns, end_ns, span_ns, busy_ns, idle_ns, critical)."""
    g = ["side", "cycle", "device_id"]
    # (side, cycle, device) packed in one integer (see align.align): same order, cheaper sort
    group = (
        (pl.col("side") == "head").cast(pl.Int64) * (1 << 62)
        + pl.col("cycle") * (1 << 16)
        + pl.col("device_id").cast(pl.Int64)
    )
    ops = (
        ops.sort(group, "start_ns", "end_ns")
        .with_columns(pl.col("end_ns").cum_max().shift(1).over(g).alias("_prev_end"))
        .with_columns(
            (pl.col("start_ns") - pl.col("_prev_end"))
            .clip(lower_bound=0)
            .fill_null(0)
            .alias("gap_ns")
        )
        .with_columns(
            pl.when(pl.col("gap_ns") == 0)
            .then(pl.lit(None, pl.String))
            .when(pl.col("launch_start_ns").is_null())
            .then(pl.lit("unknown"))
            .when(pl.col("launch_start_ns") >= pl.col("_prev_end"))
            .then(pl.lit("host"))
            .when(pl.col("launch_end_ns") > pl.col("_prev_end"))
            .then(pl.lit("launch"))
            .otherwise(pl.lit("wait"))
            .alias("gap_cause")
        )
        .drop("_prev_end")
    )
    cyc = (
        ops.group_by(g)
        .agg(
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("duration_ns").sum().alias("sum_ns"),
            pl.col("gap_ns").sum().alias("idle_ns"),
        )
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"))
    )
    cyc = cyc.with_columns((pl.col("span_ns") - pl.col("idle_ns")).alias("busy_ns"))
    # critical device: finishes last in the cycle (ties: the longer span)
    cyc = cyc.sort(
        "side", "cycle", "end_ns", "span_ns", descending=[False, False, True, True]
    ).with_columns((pl.int_range(pl.len()).over("side", "cycle") == 0).alias("critical"))
    return ops, cyc.sort(g)


def collective_split(ops: pl.DataFrame) -> pl.DataFrame:
    """On >= 2 GPUs: wait_ns (skew: waiting for the last rank) and transfer for collective ops."""
    ndev = ops["device_id"].n_unique()
    coll = pl.col("kind") == "collective"
    if ndev < 2 or ops.filter(coll).height == 0:
        return ops.with_columns(pl.lit(None, pl.Int64).alias("wait_ns"))
    ops = ops.with_columns(
        pl.when(coll)
        .then(pl.col("start_ns").rank("ordinal").over("side", "cycle", "device_id", "kind"))
        .alias("_k")
    )
    last = (
        ops.filter(coll)
        .group_by("side", "cycle", "_k")
        .agg(pl.col("start_ns").max().alias("_last_start"), pl.len().alias("_ranks"))
    )
    ops = ops.join(last, on=["side", "cycle", "_k"], how="left")
    return ops.with_columns(
        pl.when(coll & (pl.col("_ranks") >= 2))
        .then(
            pl.min_horizontal(
                pl.col("duration_ns"),
                (pl.col("_last_start") - pl.col("start_ns")).clip(lower_bound=0),
            )
        )
        .alias("wait_ns")
    ).drop("_k", "_last_start", "_ranks")


def contributions(ops: pl.DataFrame, cycles: pl.DataFrame) -> pl.DataFrame:
    """Long table (side, cycle, kind, name, phase, device_id, value_ns, count) on critical devices."""
    crit = cycles.filter(pl.col("critical")).select("side", "cycle", "device_id")
    o = ops.join(crit, on=["side", "cycle", "device_id"], how="semi")
    key = ["side", "cycle", "kind", "name", "phase", "device_id"]
    has_wait = o["wait_ns"].is_not_null().any()
    parts = []
    plain = o.filter(pl.col("wait_ns").is_null()) if has_wait else o
    parts.append(
        plain.group_by(
            "side", "cycle", "kind", pl.col("contributor").alias("name"), "phase", "device_id"
        ).agg(pl.col("duration_ns").sum().alias("value_ns"), pl.len().cast(pl.Int64).alias("count"))
    )
    if has_wait:
        w = o.filter(pl.col("wait_ns").is_not_null())
        parts.append(
            w.group_by(
                "side",
                "cycle",
                "kind",
                pl.concat_str(
                    [pl.col("contributor").cast(pl.String), pl.lit(" [wait for last rank]")]
                ).alias("name"),
                "phase",
                "device_id",
            ).agg(pl.col("wait_ns").sum().alias("value_ns"), pl.len().cast(pl.Int64).alias("count"))
        )
        parts.append(
            w.group_by(
                "side",
                "cycle",
                "kind",
                pl.concat_str([pl.col("contributor").cast(pl.String), pl.lit(" [transfer]")]).alias(
                    "name"
                ),
                "phase",
                "device_id",
            ).agg(
                (pl.col("duration_ns") - pl.col("wait_ns")).sum().alias("value_ns"),
                pl.len().cast(pl.Int64).alias("count"),
            )
        )
    gaps = o.filter(pl.col("gap_ns") > 0).with_columns(
        pl.col("gap_cause").replace_strict(GAP_CAUSES, default="idle").alias("name"),
        pl.lit("gap").alias("kind"),
    )
    parts.append(
        gaps.group_by(key).agg(
            pl.col("gap_ns").sum().alias("value_ns"), pl.len().cast(pl.Int64).alias("count")
        )
    )
    ov = (
        cycles.filter(pl.col("critical"))
        .select(
            "side", "cycle", "device_id", (pl.col("busy_ns") - pl.col("sum_ns")).alias("value_ns")
        )
        .filter(pl.col("value_ns") != 0)
        .with_columns(
            pl.lit("overlap").alias("kind"),
            pl.lit("concurrent streams (overlap)").alias("name"),
            pl.lit("(cycle)").alias("phase"),
            pl.lit(0, pl.Int64).alias("count"),
        )
    )
    parts.append(ov.select(key + ["value_ns", "count"]))
    return pl.concat(
        [p.select(key + ["value_ns", "count"]) for p in parts], how="vertical_relaxed"
    ).with_columns(pl.col("name").cast(pl.String))


def bootstrap_delta(
    base: np.ndarray, head: np.ndarray, n_boot: int = 1000, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """95 % CI of mean(head) - mean(base) for each row of the [C x N] matrices, resampling cycles.

    Vectorised: each resample is a multinomial count vector, so all contributors' resampled means
    are one matrix product.
    """
    nb, nh = base.shape[1], head.shape[1]
    if nb < 2 or nh < 2:  # one cycle has no spread: no interval, never significant
        nan = np.full(base.shape[0], np.nan)
        return nan, nan.copy()
    rng = np.random.default_rng(seed)
    cb = rng.multinomial(nb, np.full(nb, 1.0 / nb), size=n_boot).astype(np.float64) / nb
    ch = rng.multinomial(nh, np.full(nh, 1.0 / nh), size=n_boot).astype(np.float64) / nh
    diffs = head @ ch.T - base @ cb.T  # [C x B]
    lo, hi = np.percentile(diffs, [2.5, 97.5], axis=1)
    return lo, hi


def matrix(
    long: pl.DataFrame,
    side: str,
    keys: list[str],
    ncycles_index: list[int],
    key_order: pl.DataFrame,
) -> np.ndarray:
    """Pivot long (side, cycle, keys..., value_ns) to [contributors x cycles] with zeros for absent."""
    sub = long.filter(pl.col("side") == side)
    cyc_idx = pl.DataFrame({"cycle": ncycles_index, "_c": np.arange(len(ncycles_index))})
    sub = sub.join(key_order, on=keys, how="inner", nulls_equal=True).join(
        cyc_idx, on="cycle", how="inner"
    )
    m = np.zeros((key_order.height, len(ncycles_index)))
    if sub.height:
        np.add.at(
            m,
            (sub["_k"].to_numpy(), sub["_c"].to_numpy()),
            sub["value_ns"].to_numpy().astype(np.float64),
        )
    return m
