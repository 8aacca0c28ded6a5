"""Timeline helpers for the replay graph: device and host order, cross-stream waits, slots a
cycle lacks.

Stage: replay input (used by graph.py). Input: graph.py's op frame in chain order (cycle, device,
stream, start); output: numpy arrays and small frames. No loop runs per op.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.base.segscan import seg_cummax

NEG = -(1 << 40)
"""No release constraint (relative ns); far below any real time, far above int64 overflow."""
WAIT_TOL_NS = 5_000
"""An unexplained start within this of another stream's op end is taken as waiting on it."""


def host_order(h: pl.DataFrame, cyc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Launching thread of each op within its cycle (ids increase with the cycle; 0: unknown) and
    the ops in (thread, launch start) order, which is usually the chain order already."""
    th = h.select(pl.struct("process_id", "launch_thread_id").hash().alias("_t"))["_t"]
    known = h["launch_start_ns"].is_not_null().to_numpy()
    uniq = np.sort(th.unique().to_numpy())
    code = np.searchsorted(uniq, th.to_numpy()) + 1
    host = np.where(known, cyc * (len(uniq) + 1) + code, 0).astype(np.int64)
    ls = h["launch_start_ns"].fill_null(NEG).to_numpy()
    if known.all():
        ok = (host[:-1] < host[1:]) | ((host[:-1] == host[1:]) & (ls[:-1] <= ls[1:]))
        if ok.all():
            return host, np.arange(len(host), dtype=np.int64)
    return host, np.lexsort((np.arange(len(host)), ls, host))


NO_EDGES = pl.DataFrame(schema={"_i": pl.Int64, "_src": pl.Int64, "_lag": pl.Int64})


def wait_edges(h: pl.DataFrame) -> pl.DataFrame:
    """Cross-stream edges (src -> _i, lag) for unexplained ops: the other stream's op that ended
    last before the op started, if it ended within the tolerance."""
    ux = h.filter(pl.col("_ux")).select("_i", "_cyc", "device_id", "stream_id", "start_ns", "_typ")
    if ux.height == 0:
        return NO_EDGES
    ends = h.select(
        pl.col("_i").alias("_src"),
        "_cyc",
        "device_id",
        pl.col("stream_id").alias("_ss"),
        pl.col("end_ns").alias("_e"),
    ).sort("_e")
    j = ux.sort("start_ns").join_asof(
        ends,
        left_on="start_ns",
        right_on="_e",
        by=["_cyc", "device_id"],
        strategy="backward",
        check_sortedness=False,
    )
    tol = pl.max_horizontal(pl.lit(WAIT_TOL_NS), 4 * pl.col("_typ"))
    j = j.filter(
        pl.col("_src").is_not_null()
        & (pl.col("_ss") != pl.col("stream_id"))
        & (pl.col("start_ns") - pl.col("_e") <= tol)
    )
    return (
        j.select("_i", "_src", (pl.col("start_ns") - pl.col("_e")).alias("_lag"))
        if j.height
        else NO_EDGES
    )


def missing_slots(h: pl.DataFrame, slots: pl.DataFrame) -> pl.DataFrame:
    """Template slots a HEAD cycle lacks, each tied to the next present op of the device (`_next`)
    with BASE's duration and idle before it, and its contributor code (for `--take`)."""
    empty = pl.DataFrame(
        schema={"_next": pl.Int64, "_cid": pl.Int64, "_bd": pl.Int64, "_bg": pl.Int64}
    )
    present = h.filter(pl.col("slot").is_not_null()).select("_cyc", "device_id", "slot", "_i")
    if slots.height == 0 or present.height == 0:
        return empty
    # only cycles with fewer distinct slots than the template can miss one
    size = slots.group_by("device_id").len("_tpl")
    short = (
        present.group_by("_cyc", "device_id")
        .agg(pl.len().alias("_n"))
        .join(size, on="device_id")
        .filter(pl.col("_n") < pl.col("_tpl"))
        .select("_cyc", "device_id")
    )
    if short.height == 0:
        return empty
    tpl = slots.select(
        "device_id",
        "slot",
        pl.col("_bd").round(0).cast(pl.Int64),
        pl.col("_bg").round(0).cast(pl.Int64),
        "_cid",
    )
    miss = short.join(tpl, on="device_id").join(
        present, on=["_cyc", "device_id", "slot"], how="anti"
    )
    if miss.height == 0:
        return empty
    p = present.join(short, on=["_cyc", "device_id"]).sort("slot").rename({"slot": "_ns"})
    j = miss.sort("slot").join_asof(
        p,
        left_on="slot",
        right_on="_ns",
        by=["_cyc", "device_id"],
        strategy="forward",
        check_sortedness=False,
    )
    return j.filter(pl.col("_i").is_not_null()).select(
        pl.col("_i").alias("_next"), pl.col("_cid").fill_null(-1), "_bd", "_bg"
    )


def devprev_of(h: pl.DataFrame, first: np.ndarray, new_dev: np.ndarray) -> np.ndarray:
    """For each op, the index of the op that ends last among the device's earlier-starting ops of
    the cycle (-1 for the first): what attribute.py measures a gap from."""
    n = h.height
    idx = np.arange(n, dtype=np.int64)
    if not (first & ~new_dev).any():  # one stream per device and cycle: the stream predecessor
        return np.where(first, -1, idx - 1)
    s, e = h["start_ns"].to_numpy(), h["end_ns"].to_numpy()
    seg = np.cumsum(new_dev) - 1
    order = np.lexsort((e, s, seg))
    so, eo, sego = seg[order], e[order], idx[order]
    segs = np.r_[True, so[1:] != so[:-1]]
    cm = seg_cummax(eo, so, segs)  # running max end per device
    pos = np.where(eo == cm, np.arange(n), -1)
    am = np.maximum.accumulate(pos)  # position of the op holding the running max
    prev = np.r_[-1, am[:-1]]
    prev = np.where(segs, -1, prev)
    out = np.full(n, -1, dtype=np.int64)
    out[sego] = np.where(prev >= 0, sego[np.maximum(prev, 0)], -1)
    return out


def is_sorted(df: pl.DataFrame, cols: list[str]) -> bool:
    """Whether `df` is sorted by `cols` (lexicographically, ascending), checked in a few passes."""
    if df.height < 2:
        return True
    arrs = [df[c].fill_null(NEG).to_numpy() for c in cols]
    ok = arrs[-1][:-1] <= arrs[-1][1:]
    for a in reversed(arrs[:-1]):
        ok = (a[:-1] < a[1:]) | ((a[:-1] == a[1:]) & ok)
    return bool(ok.all())
