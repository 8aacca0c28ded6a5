"""Contributor codes and BASE values for the replay graph: which attribution row each HEAD op's
duration, transfer and idle belong to, and the BASE duration/idle of its aligned slot.

Stage: replay input (used by graph.py). Input: the comparison's ops (both sides) and its
attribution; output: small frames and per-op numpy arrays. No loop runs per op.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.engine.result import GAP_CAUSES

KEY = ["kind", "contributor", "phase", "device_id", "gap_cause"]


def _strings(df: pl.DataFrame) -> pl.DataFrame:
    """Categorical name columns as plain strings (the engine may hand either), for joins."""
    return df.with_columns(
        pl.col(c).cast(pl.String) for c, t in df.schema.items() if t == pl.Categorical
    )


def _codes(att: pl.DataFrame) -> pl.DataFrame:
    """Attribution keys with their row numbers (the contributor codes)."""
    return _strings(
        att.with_row_index("_code").select(
            "kind",
            "name",
            "phase",
            pl.col("device_id").cast(pl.Int32),
            pl.col("_code").cast(pl.Int64),
        )
    )


def key_table(h: pl.DataFrame, att: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame]:
    """Per op, its row in a table of distinct keys; the table carries the contributor codes:
    _cid (duration), _tid / _wid (collective transfer / wait on >= 2 GPUs), _gid (idle before)."""
    hashed = h.select(pl.struct(KEY).hash().alias("_h")).with_row_index("_r")
    uniq = hashed.group_by("_h").agg(pl.col("_r").first()).sort("_h")
    hv = uniq["_h"].to_numpy()
    key = np.searchsorted(hv, hashed["_h"].to_numpy())  # few distinct keys: a binary search each
    first_row = uniq["_r"].to_numpy().astype(np.int64)
    keys = _strings(h[first_row].select(KEY)).with_row_index("_k")
    codes = _codes(att)
    k = ["kind", "name", "phase", "device_id"]
    keys = keys.join(
        codes.rename({"_code": "_cid"}),
        left_on=["kind", "contributor", "phase", "device_id"],
        right_on=k,
        how="left",
        maintain_order="left",
    )
    for suffix, col in ((" [transfer]", "_tid"), (" [wait for last rank]", "_wid")):
        keys = (
            keys.with_columns((pl.col("contributor") + suffix).alias("_n"))
            .join(
                codes.rename({"_code": col}),
                left_on=["kind", "_n", "phase", "device_id"],
                right_on=k,
                how="left",
                maintain_order="left",
            )
            .drop("_n")
        )
    gap_names = pl.col("gap_cause").replace_strict(GAP_CAUSES, default=None, return_dtype=pl.String)
    keys = (
        keys.with_columns(pl.lit("gap").alias("_gk"), gap_names.alias("_gn"))
        .join(
            codes.rename({"_code": "_gid"}),
            left_on=["_gk", "_gn", "phase", "device_id"],
            right_on=k,
            how="left",
            maintain_order="left",
        )
        .drop("_gk", "_gn")
    )
    keys = keys.with_columns(
        pl.col(c).fill_null(-1) for c in ("_cid", "_tid", "_wid", "_gid")
    ).sort("_k")
    return key.astype(np.int64), keys


def collectives(ops: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per op of `ops`: collective instance across GPUs (-1: none) and transfer time after the
    last rank arrived (the duration for everything else). The k-th collective of a cycle on each
    GPU is one instance, as attribute.collective_split matches them."""
    n = ops.height
    cg = np.full(n, -1, dtype=np.int64)
    tail = ops["duration_ns"].to_numpy().copy()
    coll = (
        ops.with_row_index("_row")
        .filter(pl.col("kind") == "collective")
        .select("_row", "cycle", "device_id", "start_ns", "end_ns")
    )
    if coll.height == 0:
        return cg, tail
    coll = coll.with_columns(
        pl.col("start_ns").rank("ordinal").over("cycle", "device_id").alias("_kth")
    )
    grp = (
        coll.group_by("cycle", "_kth")
        .agg(
            pl.col("start_ns").max().alias("_last"), pl.col("device_id").n_unique().alias("_ranks")
        )
        .filter(pl.col("_ranks") >= 2)
        .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("_cg"))
    )
    coll = coll.join(grp, on=["cycle", "_kth"])
    rows = coll["_row"].to_numpy().astype(np.int64)
    cg[rows] = coll["_cg"].to_numpy()
    tail[rows] = (coll["end_ns"] - coll["_last"]).to_numpy()
    return cg, tail


def base_values(base: pl.DataFrame, att: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """BASE means per aligned slot (duration, transfer, idle before, contributor), per gap cause."""
    _, btail = collectives(base)
    b = _strings(base.with_columns(pl.Series("_tail", btail)))
    codes = _codes(att)
    slot = (
        b.filter(pl.col("slot").is_not_null())
        .group_by("device_id", "slot")
        .agg(
            pl.col("duration_ns").mean().alias("_bd"),
            pl.col("_tail").mean().alias("_bt"),
            pl.col("gap_ns").mean().alias("_bg"),
            pl.col("kind").first(),
            pl.col("contributor").first(),
            pl.col("phase").first(),
        )
        .join(
            codes,
            left_on=["kind", "contributor", "phase", "device_id"],
            right_on=["kind", "name", "phase", "device_id"],
            how="left",
        )
        .rename({"_code": "_cid"})
        .drop("kind", "contributor", "phase")
    )
    cause = (
        b.filter(pl.col("gap_ns") > 0)
        .group_by("device_id", "phase", "gap_cause")
        .agg(pl.col("gap_ns").mean().alias("_bgc"))
    )
    per = (
        att.with_row_index("_cid")
        .filter(pl.col("base_count_per_cycle") > 0)
        .select(
            pl.col("_cid").cast(pl.Int64),
            (pl.col("base_ms_per_cycle") * 1e6 / pl.col("base_count_per_cycle")).alias("_bc"),
        )
    )
    return {"slot": slot, "cause": cause, "contributor": per}


def op_base_values(
    h: pl.DataFrame, keys: pl.DataFrame, key: np.ndarray, slots: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BASE's duration, transfer time and idle before each HEAD op (base_dur, base_tail,
    base_gap; -1 duration: none, the op is removed when taken): the aligned instance's slot
    mean, else the contributor's / gap cause's mean. `h`: graph.py's ops; `keys`, `key`:
    key_table's, joined with base_values' "cause" and "contributor"; `slots`: base_values'
    "slot"."""
    kx = keys.select(
        pl.col("_bgc").fill_null(0).round(0).cast(pl.Int64),
        pl.col("_bc").fill_null(-1).round(0).cast(pl.Int64),
    )
    bgc, bc = kx["_bgc"].to_numpy()[key], kx["_bc"].to_numpy()[key]
    bs = h.select("device_id", "slot").join(
        slots, on=["device_id", "slot"], how="left", maintain_order="left"
    )
    has_slot = bs["slot"].is_not_null().to_numpy()
    sd = bs.select(
        *(pl.col(x).round(0).cast(pl.Int64).fill_null(-1) for x in ("_bd", "_bt", "_bg"))
    )
    bd_slot, bt_slot, bg_slot = (sd[x].to_numpy() for x in ("_bd", "_bt", "_bg"))
    has_bs = bd_slot >= 0
    # an op with no slot was added in HEAD: taken from BASE it is removed (-1); a slot BASE never
    # filled (a device only HEAD has) falls back to BASE's per-instance mean of the contributor
    base_dur = np.where(has_bs, bd_slot, np.where(has_slot, bc, -1))
    base_tail = np.where(bt_slot >= 0, bt_slot, base_dur)
    base_gap = np.where(has_bs, bg_slot, np.where(has_slot, bgc, 0))
    return base_dur, base_tail, base_gap
