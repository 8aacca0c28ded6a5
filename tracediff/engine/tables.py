"""The comparison's tables built from the aligned, attributed ops: attribution, cycles, events,
totals, collectives.

Stage: engine output. Input: the aligned, attributed ops of both sides (engine/statistics/attribute.py);
output: the `Comparison` frames of those names, each conformed to tracediff/runs/schema.py's
DIFF_TABLES as it is built.
"""

from __future__ import annotations

import polars as pl

from tracediff.engine.cycle import align as al
from tracediff.engine.groupsum import group_sums
from tracediff.engine.runsets import RunIndex
from tracediff.engine.statistics import attribute as at
from tracediff.engine.statistics import stats as st
from tracediff.runs.schema import conform_diff, frame_schema

KEYS = ["kind", "name", "phase", "device_id"]
"""A contributor of the GPU attribution."""


def op_key(name: pl.Expr) -> pl.Expr:
    """An op's name with what a re-tune or new template arguments change made alike: every
    number `#` (tile shapes, vector widths, block sizes: `gemm_128x64_16x6` and `gemm_256x128_32x3`
    agree), lower case."""
    return name.str.replace_all(r"\d+", "#").str.to_lowercase()


def same_op() -> pl.Expr:
    """An op of head in the place of base's op is the same op under a new name (`renamed`: the
    names agree but for numbers, `op_key`, or one extends the other: a re-tuned variant's
    suffix) or another op (`replaced`: another kernel family or functor, the cuDNN attention
    kernel where an elementwise kernel now runs, `neg_kernel` where `exp_kernel` ran)."""
    b, h = op_key(pl.col("base_name")), op_key(pl.col("head_name"))
    return (b == h) | h.str.starts_with(b) | b.str.starts_with(h)


def attribution(
    long: pl.DataFrame,
    cb: list[int],
    ch: list[int],
    n_boot: int,
    renamed: pl.DataFrame,
    runs: RunIndex | None = None,
) -> pl.DataFrame:
    """One row per contributor (`long`: at.contributions), largest |change| first, with ids
    c0, c1..., counts per cycle, a share (stats.share) and a status. `cb`/`ch`: the cycles
    of each side; `renamed`: align.renames (those rows get status "renamed", or "replaced"
    where head's op is another op than base's (`same_op`), and their two names as base_name /
    head_name, null elsewhere); `runs`: which run
    each cycle came from (run sets: engine/runsets.py)."""
    stats = st.per_cycle_stats(long, KEYS, cb, ch, n_boot, runs, counts=True)
    # renamed: an op of head in the place of base's op, where base never has it (align.renames
    # leaves out substitutions base makes itself); base's time in that place is on the same row
    # (align carries the label to base's ops), so the old name has no `removed` row of its own
    renamed_row = ~pl.col("kind").is_in(["gap", "overlap"])
    att = (
        stats.join(renamed, on="name", how="left")
        .sort("_k")
        .with_columns(
            (pl.col("_cb").fill_null(0) / len(cb)).alias("base_count_per_cycle"),
            (pl.col("_ch").fill_null(0) / len(ch)).alias("head_count_per_cycle"),
        )
        .with_columns(
            pl.when(renamed_row).then(pl.col(c)).alias(c) for c in ("base_name", "head_name")
        )
        .with_columns(
            st.share(),
            pl.when(pl.col("name") == at.GAP_CAUSES["host"])
            .then(pl.lit("host-side"))
            .when(pl.col("kind").is_in(["gap", "overlap"]))
            .then(pl.lit("-"))
            .when(pl.col("base_name").is_not_null() & same_op())
            .then(pl.lit("renamed"))
            .when(pl.col("base_name").is_not_null())
            .then(pl.lit("replaced"))
            .when(pl.col("base_count_per_cycle") == 0)
            .then(pl.lit("added"))
            .when(pl.col("head_count_per_cycle") == 0)
            .then(pl.lit("removed"))
            .when(pl.col("base_count_per_cycle") != pl.col("head_count_per_cycle"))
            .then(pl.lit("mixed"))
            .otherwise(pl.lit("matched"))
            .alias("status"),
        )
        .filter((pl.col("base_ms_per_cycle") != 0) | (pl.col("head_ms_per_cycle") != 0))
        .sort(st.BY_CHANGE)  # ties: key order, so the ids c0, c1... are stable
        .with_row_index("_r")
        .with_columns(
            pl.concat_str([pl.lit("c"), pl.col("_r").cast(pl.String)]).alias("contributor_id")
        )
        .drop("_r", "_k", "_cb", "_ch")
    )
    return conform_diff("attribution", att)


def cycle_table(cyc: pl.DataFrame, ranges_b: pl.DataFrame, ranges_h: pl.DataFrame) -> pl.DataFrame:
    """`Comparison.cycles`: per side, cycle and device (at.per_device_cycles), with each cycle's
    host range wall time where both sides were cut at host ranges."""
    if ranges_b.height and ranges_h.height:
        wall = pl.concat(
            [
                r.group_by("cycle")
                .agg(pl.col("wall_ns").max())
                .with_columns(pl.lit(side, al.SIDES).alias("side"))
                for side, r in (("base", ranges_b), ("head", ranges_h))
            ]
        )
        cyc = cyc.join(wall, on=["side", "cycle"], how="left")
    else:
        cyc = cyc.with_columns(pl.lit(None, pl.Int64).alias("wall_ns"))
    cols = frame_schema("cycles").names()
    return conform_diff("cycles", cyc.select(cols).with_columns(pl.col("side").cast(pl.String)))


def events(ops: pl.DataFrame, cyc: pl.DataFrame, attribution: pl.DataFrame) -> pl.DataFrame:
    starts = cyc.select("side", "cycle", "device_id", pl.col("start_ns").alias("_c0"))
    e = ops.join(starts, on=["side", "cycle", "device_id"], how="left")
    e = e.with_columns(
        pl.col("wait_ns").is_not_null().alias("_split")
        if "wait_ns" in e.columns
        else pl.lit(False).alias("_split")
    )
    # contributor ids by string on the distinct keys (small), then joined back on the frame's own
    # columns: never compare categoricals built in different places. A collective split into
    # wait and transfer belongs to its transfer row.
    key = ["kind", "contributor", "phase", "device_id", "_split"]
    name = pl.col("contributor").cast(pl.String)
    distinct = (
        e.select(key)
        .unique()
        .with_columns(
            pl.when(pl.col("_split")).then(name + " [transfer]").otherwise(name).alias("_name"),
            pl.when(pl.col("_split")).then(name + " [wait for last rank]").alias("_wname"),
        )
    )
    att = attribution.select(
        pl.col("kind").alias("_kind"),
        "name",
        pl.col("phase").alias("_phase"),
        "device_id",
        "contributor_id",
    )
    on = ["_kind", "_phase", "device_id"]
    distinct = distinct.with_columns(
        pl.col("kind").cast(pl.String).alias("_kind"),
        pl.col("phase").cast(pl.String).alias("_phase"),
    )
    ids = (
        distinct.join(
            att.rename({"name": "_name"}), on=[*on, "_name"], how="left", nulls_equal=True
        )
        .join(
            att.rename({"name": "_wname", "contributor_id": "_wid"}),
            on=[*on, "_wname"],
            how="left",
            nulls_equal=True,
        )
        # an instance that was all wait has no transfer row: it belongs to the wait row
        .with_columns(pl.coalesce("contributor_id", "_wid").alias("contributor_id"))
        .drop("_name", "_wname", "_wid", "_kind", "_phase")
    )
    e = e.join(ids, on=key, how="left", nulls_equal=True)
    return conform_diff(
        "events",
        e.select(
            pl.col("side").cast(pl.String),
            "cycle",
            pl.col("device_id").cast(pl.Int32),
            "stream_id",
            pl.col("kind").cast(pl.String),
            "name",
            (pl.col("start_ns") - pl.col("_c0")).alias("rel_start_ns"),
            (pl.col("end_ns") - pl.col("_c0")).alias("rel_end_ns"),
            "duration_ns",
            "slot",
            "contributor_id",
            pl.col("status").cast(pl.String),
            "grid",
            "block",
        ).sort("side", "cycle", "device_id", "rel_start_ns"),
    )


def total_sums(ops: pl.DataFrame) -> pl.DataFrame:
    """kind, name, duration_ns, n: one file's GPU time and op count per (kind, name), what
    `totals` sums over a side's files. By the ops' codes (engine/groupsum.py), else polars."""
    got = group_sums(ops, ["kind", "name"], {"duration_ns": "duration_ns"}, "n")
    if got is not None:
        return got
    return ops.group_by("kind", "name").agg(
        pl.col("duration_ns").sum(), pl.len().cast(pl.Int64).alias("n")
    )


def totals(sums: pl.DataFrame) -> pl.DataFrame:
    """GPU time per (kind, name) summed over all GPUs and cycles of each side (ms, not per
    cycle). `sums`: side and each file's `total_sums`."""
    g = (
        sums.with_columns(pl.col("name").cast(pl.String))  # kind stays the enum: its order
        .group_by("side", "kind", "name")
        .agg((pl.col("duration_ns").sum() / 1e6).alias("ms"), pl.col("n").sum())
    )
    b = g.filter(pl.col("side") == "base").select(
        "kind", "name", pl.col("ms").alias("base_ms"), pl.col("n").alias("base_count")
    )
    h = g.filter(pl.col("side") == "head").select(
        "kind", "name", pl.col("ms").alias("head_ms"), pl.col("n").alias("head_count")
    )
    j = b.join(h, on=["kind", "name"], how="full", coalesce=True).fill_null(0)
    j = j.with_columns((pl.col("head_ms") - pl.col("base_ms")).alias("delta_ms")).sort(
        pl.col("delta_ms").abs(), "kind", "name", descending=[True, False, False]
    )  # ties (every row of two equal runs) by kind and name: the same order every run
    return conform_diff("totals", j)


def collectives(sums: pl.DataFrame, nb: int, nh: int) -> pl.DataFrame:
    """Per collective op, dtype, bytes and GPU, each side's time, wait and transfer per cycle.
    `sums`: side, name, bytes, device_id, t, w: every collective row's duration_ns and wait_ns
    summed per run, kernel name and GPU (engine/pipeline/collsum.py; integers, so the same sums
    as per row). Only the kernel names are decoded (a run of hundreds of ranks has millions of
    rows, a few names)."""
    c = sums.group_by("side", "name", "bytes", "device_id").agg(
        pl.col("t").sum(), pl.col("w").sum()
    )
    if c.height == 0:
        return conform_diff("collectives", pl.DataFrame())
    from tracediff.parse.nccl import decode

    names = c.select("name").unique()  # the regex runs once per distinct kernel name
    ops_of = pl.concat([names, decode(names["name"]).select("op", "dtype")], how="horizontal")
    c = c.join(ops_of, on="name", how="left")
    g = c.group_by("side", "op", "dtype", "bytes", "device_id").agg(
        pl.col("t").sum(), pl.col("w").sum()
    )
    n = pl.when(pl.col("side") == "base").then(pl.lit(nb)).otherwise(pl.lit(nh))
    g = g.with_columns(
        (pl.col("t") / n / 1e6).alias("ms"), (pl.col("w") / n / 1e6).alias("wait_ms")
    )
    b, h = (
        g.filter(pl.col("side") == s).select(
            "op",
            "dtype",
            "bytes",
            "device_id",
            pl.col("ms").alias(f"{s}_ms_per_cycle"),
            pl.col("wait_ms").alias(f"{s}_wait_ms_per_cycle"),
        )
        for s in ("base", "head")
    )
    # zero only the per-cycle times: fill_null(0.0) on the frame would turn device_id into a float
    # and unknown bytes into 0 (unknown is null)
    j = b.join(
        h, on=["op", "dtype", "bytes", "device_id"], how="full", coalesce=True, nulls_equal=True
    ).with_columns(pl.col("^.*_ms_per_cycle$").fill_null(0.0))
    j = j.with_columns(
        (pl.col("base_ms_per_cycle") - pl.col("base_wait_ms_per_cycle")).alias(
            "base_transfer_ms_per_cycle"
        ),
        (pl.col("head_ms_per_cycle") - pl.col("head_wait_ms_per_cycle")).alias(
            "head_transfer_ms_per_cycle"
        ),
        (pl.col("head_ms_per_cycle") - pl.col("base_ms_per_cycle")).alias("delta_ms_per_cycle"),
    ).sort(  # ties by the row's key: the same order every run
        pl.col("delta_ms_per_cycle").abs(),
        "op",
        "dtype",
        "bytes",
        "device_id",
        descending=[True, False, False, False, False],
    )
    return conform_diff("collectives", j)
