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

import functools

import numpy as np
import polars as pl

from tracediff.base.segscan import seg_cummax
from tracediff.engine.cycle import align as al
from tracediff.engine.result import GAP_CAUSES as GAP_CAUSES  # the gap contributors' names
from tracediff.engine.statistics.resample import drawn_weights, take_ahead

_CAUSE = pl.Enum(list(GAP_CAUSES))


def per_device_cycles(
    ops: pl.DataFrame, groups: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(ops in cycle order with gap_ns, gap_cause and `critical` (the op ran on its cycle's
    critical device); cycles: side, cycle, device_id, start_ns, end_ns, span_ns, busy_ns, idle_ns,
    critical). `groups`: where `ops` are already in cycle order, their (side, device, cycle)
    groups as `al.groups` gives them (`Sequences.gid`, `.first`: aligned ops), not found again."""
    if groups is None:
        ops, key = al.in_cycle_order(ops)
        gid, first = al.groups(key)
    else:
        gid, first = groups
    start = ops["start_ns"].to_numpy()
    end = ops["end_ns"].to_numpy()
    n = len(start)
    head_row = np.zeros(n, bool)
    head_row[first] = True
    run_max = seg_cummax(end, gid, first)
    prev_end = np.empty(n, np.int64)
    prev_end[1:] = run_max[:-1]
    gap = np.where(head_row, 0, np.maximum(start - prev_end, 0))
    ops = ops.with_columns(
        pl.Series("gap_ns", gap),
        pl.Series("_prev_end", np.where(head_row, 0, prev_end)),
    ).with_columns(
        pl.when(pl.col("gap_ns") == 0)
        .then(pl.lit(None, _CAUSE))
        .when(pl.col("launch_start_ns").is_null())
        .then(pl.lit("unknown", _CAUSE))
        .when(pl.col("launch_start_ns") >= pl.col("_prev_end"))
        .then(pl.lit("host", _CAUSE))
        .when(pl.col("launch_end_ns") > pl.col("_prev_end"))
        .then(pl.lit("launch", _CAUSE))
        .otherwise(pl.lit("wait", _CAUSE))
        .alias("gap_cause")
    )
    if n:
        g_start = np.minimum.reduceat(start, first)
        g_end = run_max[np.append(first[1:], n) - 1]  # the group's running max at its last row
        g_sum = np.add.reduceat(ops["duration_ns"].to_numpy(), first)
        g_idle = np.add.reduceat(gap, first)
    else:
        g_start = g_end = g_sum = g_idle = np.zeros(0, np.int64)
    cyc = pl.DataFrame(
        {
            "side": ops["side"].gather(first),
            "cycle": ops["cycle"].gather(first),
            "device_id": ops["device_id"].gather(first).cast(pl.Int32),
            "start_ns": g_start,
            "end_ns": g_end,
            "sum_ns": g_sum,
            "idle_ns": g_idle,
        }
    ).with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"))
    cyc = cyc.with_columns((pl.col("span_ns") - pl.col("idle_ns")).alias("busy_ns"))
    # critical device: finishes last in the cycle (ties: the longer span, then the lower device:
    # `_g` follows the device order within a side; without it a tie was settled by the sort)
    cyc = (
        cyc.with_row_index("_g")
        .sort(
            "side", "cycle", "end_ns", "span_ns", "_g", descending=[False, False, True, True, False]
        )
        .with_columns((pl.int_range(pl.len()).over("side", "cycle") == 0).alias("critical"))
    )
    crit_g = cyc.sort("_g")["critical"].to_numpy()
    ops = ops.with_columns(pl.Series("critical", crit_g[gid] if n else np.zeros(0, bool))).drop(
        "_prev_end"
    )
    return ops, cyc.drop("_g").sort("side", "cycle", "device_id")


def collective_split(ops: pl.DataFrame) -> pl.DataFrame:
    """On >= 2 GPUs: wait_ns (skew: waiting for the last rank) and transfer for collective ops.

    The k-th collective of a (side, cycle) on each device is one instance; its last rank to
    start sets when the transfer can begin. ops must be in cycle order (per_device_cycles).
    """
    ndev = ops["device_id"].n_unique()
    coll = (ops["kind"] == "collective").to_numpy()
    if ndev < 2 or not coll.any():
        return ops.with_columns(pl.lit(None, pl.Int64).alias("wait_ns"))
    rows = np.flatnonzero(coll)
    key = al.group_key(ops)[rows]
    cgid, cfirst = al.groups(key)  # rows are in cycle order: each device-cycle is contiguous
    k = np.arange(len(rows)) - cfirst[cgid]
    c = pl.DataFrame(
        {
            "s": key >> 48,
            "cycle": key & 0xFFFFFFFF,
            "k": k,
            "start": ops["start_ns"].to_numpy()[rows],
            "dur": ops["duration_ns"].to_numpy()[rows],
        }
    )
    c = c.with_columns(
        pl.col("start").max().over("s", "cycle", "k").alias("_last"),
        pl.len().over("s", "cycle", "k").alias("_ranks"),
    ).select(
        pl.when(pl.col("_ranks") >= 2)
        .then(pl.min_horizontal(pl.col("dur"), (pl.col("_last") - pl.col("start")).clip(0)))
        .alias("w")
    )
    w = np.zeros(ops.height, np.int64)
    valid = np.zeros(ops.height, bool)
    wv = c["w"]
    w[rows] = wv.fill_null(0).to_numpy()
    valid[rows] = wv.is_not_null().to_numpy()
    return (
        ops.with_columns(pl.Series("_w", w), pl.Series("_v", valid))
        .with_columns(pl.when(pl.col("_v")).then(pl.col("_w")).alias("wait_ns"))
        .drop("_w", "_v")
    )


def contributions(ops: pl.DataFrame, cycles: pl.DataFrame) -> pl.DataFrame:
    """Long table (side, cycle, kind, name, phase, device_id, value_ns, count) on critical devices."""
    cols = ["side", "cycle", "kind", "contributor", "phase", "device_id", "duration_ns", "wait_ns"]
    # only the columns used, before the filter copies the rows
    o = ops.select(*cols, "gap_ns", "gap_cause", "critical").filter(pl.col("critical"))
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
        pl.col("gap_cause")
        .cast(pl.String)
        .replace_strict(GAP_CAUSES, default="idle")
        .alias("name"),
        pl.lit("gap").alias("kind"),
    )
    parts.append(
        gaps.group_by(key).agg(
            pl.col("gap_ns").sum().alias("value_ns"), pl.len().cast(pl.Int64).alias("count")
        )
    )
    parts.append(overlap(cycles, key))
    text = [pl.col(c).cast(pl.String) for c in ("side", "kind", "name", "phase")]
    return pl.concat(
        [p.select(key + ["value_ns", "count"]).with_columns(text) for p in parts],
        how="vertical_relaxed",
    )


def overlap(cycles: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """The stream-overlap row of each cycle: the critical GPU's busy time less the sum of its
    ops' durations (negative where streams ran at once), as `key` + value_ns, count."""
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
    return ov.select(key + ["value_ns", "count"])


@functools.lru_cache(maxsize=2)
def _resample_weights(nb: int, nh: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's resampling weights (each row: how often each cycle was drawn / n). The same
    for every call with the same cycle counts (GPU attribution, host phases, the total), so drawn
    once: 1000 x 6,000 binomial draws a side cost more than the statistics themselves (drawn
    natively, the same numbers as numpy's: engine/statistics/resample.py; a compare of one run a
    side has drawn them on a thread meanwhile, `resample.Ahead`)."""
    ahead = take_ahead(nb, nh, n_boot, seed)  # drawn during the compare (resample.Ahead)
    cb, ch = ahead if ahead is not None else drawn_weights(nb, nh, n_boot, seed)
    cb.flags.writeable = ch.flags.writeable = False
    return cb, ch


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
    cb, ch = _resample_weights(nb, nh, n_boot, seed)
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
