"""Per-contributor statistics: per-cycle means of both sides, bootstrap CI, significance.

Stage: engine. Input: a long table (side, cycle, keys..., value_ns); output: one row per key.
Used for the GPU attribution (per GPU and summed over GPUs) and the host phases.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.engine.groupsum import group_ids
from tracediff.engine.runsets import RunIndex
from tracediff.engine.statistics import attribute as at
from tracediff.engine.statistics import runstats as rs

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
    long: pl.DataFrame,
    keys: list[str],
    cycles_b: list[int],
    cycles_h: list[int],
    n_boot: int,
    runs: RunIndex | None = None,
    counts: bool = False,
) -> pl.DataFrame:
    """One row per distinct `keys` of `long` (side, cycle, keys..., value_ns), in key order (`_k`):
    base/head ms per cycle (absent cycles count 0), their difference, its 95 % CI, and whether
    it is significant.

    One run a side (`runs` None or single): the CI is the bootstrap over cycles. Run sets
    (`runs.across_runs`): each run's mean per cycle is one sample; means are the mean over runs
    (each run weighs the same), and the CI and decision are engine/statistics/runstats.py's across-run test.
    Also, per side, the number of runs in which the key occurs (`base_runs`, `head_runs`) and
    whether it moved the same way in every run (`consistent`: every head run's mean beyond every
    base run's, in the direction of the change; null with one run a side). `counts`: also each
    side's sum of `count` (`_cb`, `_ch`; null where the side has no row of the key)."""
    pivot = _pivot(long, keys, cycles_b, cycles_h, counts)
    if pivot is None:  # codes that do not fit, cycles listed twice: polars' joins
        long = _as_text(long, keys)
        key_order = (
            long.select(keys)
            .unique()
            .sort(keys)
            .with_row_index("_k")
            .with_columns(pl.col("_k").cast(pl.Int64))
        )
        mb = at.matrix(long, "base", keys, cycles_b, key_order)
        mh = at.matrix(long, "head", keys, cycles_h, key_order)
        if counts:
            key_order = _counted(long, keys, key_order)
    else:
        key_order, mb, mh = pivot
    if runs is not None and runs.across_runs:
        rb = rs.run_means(mb, runs.of("base", cycles_b), runs.runs_base)
        rh = rs.run_means(mh, runs.of("head", cycles_h), runs.runs_head)
        rb, rh = rb[:, ~np.isnan(rb).any(axis=0)], rh[:, ~np.isnan(rh).any(axis=0)]
        t = rs.across_runs(rb, rh)
        bm, hm, lo, hi = t.base_ms, t.head_ms, t.ci95_low, t.ci95_high
        up = rh.min(axis=1) > rb.max(axis=1)
        down = rh.max(axis=1) < rb.min(axis=1)
        consistent = pl.Series("consistent", np.where(hm >= bm, up, down), pl.Boolean)
    else:
        lo, hi = at.bootstrap_delta(mb, mh, n_boot)
        bm, hm = mb.mean(axis=1), mh.mean(axis=1)
        consistent = pl.Series("consistent", [None] * key_order.height, pl.Boolean)
    present_b = _runs_present(mb, runs, "base", cycles_b)
    present_h = _runs_present(mh, runs, "head", cycles_h)
    bm, hm = bm / 1e6, hm / 1e6
    return key_order.with_columns(
        pl.Series("base_ms_per_cycle", bm),
        pl.Series("head_ms_per_cycle", hm),
        pl.Series("delta_ms_per_cycle", hm - bm),
        pl.Series("ci95_low", lo / 1e6),
        pl.Series("ci95_high", hi / 1e6),
        pl.Series("base_runs", present_b, pl.UInt32),
        pl.Series("head_runs", present_h, pl.UInt32),
        consistent,
    ).with_columns(_significant())


def _pivot(
    long: pl.DataFrame, keys: list[str], cycles_b: list[int], cycles_h: list[int], counts: bool
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray] | None:
    """key_order (keys in key order, `_k`; with `counts`, each side's sum of `count` per key as
    `_cb`, `_ch`, null where the side has no row of it) and base's and head's [keys x cycles]
    matrices of value_ns sums (at.matrix's), from each row's key code (groupsum.group_ids: one
    pass over the keys instead of a unique, two four-key joins and a group-by: ~0.1 CPU-s less
    at 400 k rows). None where the codes do not fit or a cycle is listed twice (the joins then)."""
    got = group_ids(long, keys)
    if got is None:
        return None
    group, first, k, _ = got
    # `unique().sort(keys)`'s order, of the text (a categorical sorts by its codes otherwise)
    order = _as_text(long.select(keys)[first], keys).with_row_index("_g").sort(keys)
    rank = np.empty(k, np.int64)
    rank[order["_g"].to_numpy()] = np.arange(k)
    row_k = rank[group]
    key_order = order.drop("_g").with_row_index("_k").with_columns(pl.col("_k").cast(pl.Int64))
    cycle = long["cycle"].to_numpy()
    value = long["value_ns"].to_numpy().astype(np.float64)
    mats, sums = [], []
    for name, col, cycles in (("base", "_cb", cycles_b), ("head", "_ch", cycles_h)):
        on = (long["side"] == name).to_numpy()
        keyed, cyc = row_k[on], cycle[on]
        place = _columns(np.asarray(cycles, np.int64), cyc)
        if place is None:
            return None
        hit = place >= 0
        n = len(cycles)
        # sums of whole nanoseconds, exact in float64 in any order below 2**53 ns (104 days), as
        # np.add.at's were: a bincount
        flat = np.bincount(keyed[hit] * n + place[hit], weights=value[on][hit], minlength=k * n)
        mats.append(flat.reshape(k, n))
        if counts:
            total = np.bincount(keyed, weights=long["count"].to_numpy()[on], minlength=k)
            absent = np.flatnonzero(np.bincount(keyed, minlength=k) == 0)
            sums.append(pl.Series(col, total.astype(np.int64)).scatter(absent, None))
    return key_order.with_columns(sums), mats[0], mats[1]


def _as_text(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """`frame` with its categorical `keys` as text: the keys' order and what they are joined to
    (the contributions' names come categorical from the files, engine/pipeline/join.py)."""
    schema = frame.schema
    cats = [k for k in keys if isinstance(schema[k], (pl.Categorical, pl.Enum))]
    return frame.with_columns(pl.col(cats).cast(pl.String)) if cats else frame


def _columns(listed: np.ndarray, cycle: np.ndarray) -> np.ndarray | None:
    """Each row's column: where its `cycle` sits in `listed` (-1: not listed); None where a
    cycle is listed twice. A table over the cycles' range where it is small (cycles are
    numbered 0, 1, ...), else a search."""
    if len(listed) == 0:
        return np.full(len(cycle), -1, np.int64)
    lo, hi = int(listed.min()), int(listed.max())
    if hi - lo < 4 * len(listed) + 1024:
        table = np.full(hi - lo + 1, -1, np.int64)
        table[listed - lo] = np.arange(len(listed))
        if int((table >= 0).sum()) != len(listed):
            return None
        inside = (cycle >= lo) & (cycle <= hi)
        out = np.full(len(cycle), -1, np.int64)
        out[inside] = table[cycle[inside] - lo]
        return out
    by = np.argsort(listed, kind="stable")
    ordered = listed[by]
    if (np.diff(ordered) == 0).any():
        return None
    place = np.searchsorted(ordered, cycle)
    hit = place < len(listed)
    hit[hit] = ordered[place[hit]] == cycle[hit]
    return np.where(hit, by[np.minimum(place, len(listed) - 1)], -1)


def _counted(long: pl.DataFrame, keys: list[str], key_order: pl.DataFrame) -> pl.DataFrame:
    """key_order with each side's sum of `count` per key (`_cb`, `_ch`; null: no row)."""
    counts = long.group_by("side", *keys).agg(pl.col("count").sum())
    for side, col in (("base", "_cb"), ("head", "_ch")):
        key_order = key_order.join(
            counts.filter(pl.col("side") == side).drop("side").rename({"count": col}),
            on=keys,
            how="left",
            nulls_equal=True,
        )
    return key_order


def _runs_present(m: np.ndarray, runs: RunIndex | None, side: str, cycles: list[int]) -> np.ndarray:
    """Per row of m [keys x cycles]: in how many runs the key has a non-zero value."""
    if runs is None or runs.runs(side) == 1:
        once: np.ndarray = (m != 0).any(axis=1).astype(np.uint32)
        return once
    per_run = rs.run_means(np.abs(m), runs.of(side, cycles), runs.runs(side))
    count: np.ndarray = (np.nan_to_num(per_run) != 0).sum(axis=1).astype(np.uint32)
    return count


def across_gpus(
    long: pl.DataFrame,
    attribution: pl.DataFrame,
    cycles_b: list[int],
    cycles_h: list[int],
    n_boot: int,
    runs: RunIndex | None = None,
) -> pl.DataFrame:
    """Contributors summed over GPUs: one row per (kind, name, phase).

    Each cycle is charged to the GPU that finished last, and which GPU that is can change from
    cycle to cycle and between the runs: then an unchanged kernel shows up as a loss on one GPU
    and an equal gain on another, and a real change is spread thin over all of them. Summed over
    GPUs (per cycle, before the bootstrap) those cancel or add up, and the rows still sum to the
    measured change. `top_device_id` says where most of the change sits.
    """
    keys = ["kind", "name", "phase"]
    st = per_cycle_stats(long, keys, cycles_b, cycles_h, n_boot, runs)
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
