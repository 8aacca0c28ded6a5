"""The critical path of a replayed cycle: what the predicted cycle time is made of.

Stage: replay output (used by whatif.py). Input: the replay graph and one replay; output: a
frame of contributors on the path (ops, and the idle between them by cause) with their share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.replay.order import NEG
from tracediff.replay.syncs import offsets
from tracediff.replay.types import Replayed, ReplayGraph

IDLE = {
    "host": "idle: waiting for the host to launch",
    "dispatch": "idle: gap after the previous op on the stream",
    "cross": "idle: waiting on another stream",
    "sync": "idle: host launching after it synced with the GPU",
}
"""The idle on a critical path, by what the walk left an op's start through."""


EMPTY = pl.DataFrame(
    schema={
        "kind": pl.String,
        "name": pl.String,
        "phase": pl.String,
        "ms_per_cycle": pl.Float64,
        "share": pl.Float64,
    }
)


def critical_path(g: ReplayGraph, rp: Replayed, spans: pl.DataFrame, top: int) -> pl.DataFrame:
    """What each cycle's critical path is made of, summed over cycles: ops per contributor and
    the idle on the path. Walked back from the op that ends last on the critical device: an op
    whose start is bound by its stream predecessor leads to it, one bound by a cross edge to the
    edge's source, a collective that ended at the last rank's arrival to that rank, and a host
    release ends the walk (the time before it is host time). Shares are of the replayed span.

    Phases: what binds each op's start (`_bindings`), each cycle's sink (`_sinks`), the walk
    back from all sinks at once (`_walk`), and the time on the path per contributor and idle
    cause (`_summary`)."""
    if len(rp.start) == 0 or spans.height == 0:
        return EMPTY.clone()
    b = _bindings(g, rp)
    cur, s0 = _sinks(g, rp.end, spans)
    on, idle = _walk(g, rp, b, cur, s0)
    return _summary(g, on, idle, spans, top)


@dataclass
class _Bindings:
    """Per op, what its replayed start (or end) is bound by."""

    prev_end: np.ndarray  # the stream predecessor's end (NEG for the first op)
    chain: np.ndarray  # bool: start = predecessor's end + lag
    host: np.ndarray  # bool: not chain-bound, start = the host's release
    src: np.ndarray  # the cross edge's source that binds the start (-1: none)
    last_rank: np.ndarray  # collectives: the op of the rank that arrived last (-1: none)
    floor: np.ndarray  # bool: a collective that ended at the last rank's arrival + transfer
    sync: np.ndarray  # per sync window: its return was decided by the GPU op waited on
    head: np.ndarray  # the first op of each op's run of chain-bound ops
    lag_cs: np.ndarray  # running sum of the dispatch gaps of chain-bound ops (n + 1)


def _bindings(g: ReplayGraph, rp: Replayed) -> _Bindings:
    """What binds each op: its stream predecessor, the host, a cross edge, the last rank of its
    collective; which syncs returned when the GPU did; where each run of chain-bound ops began."""
    n = len(rp.start)
    start, end = rp.start, rp.end
    idx = np.arange(n)
    prev_end = np.r_[NEG, end[:-1]]
    chain_bound = ~g.first & (start == prev_end + rp.lag)
    host_bound = ~chain_bound & (start == rp.release)
    # the cross edge that binds each remaining op
    bind_src = np.full(n, -1, dtype=np.int64)
    if len(rp.edge_src):
        hit = end[rp.edge_src] + rp.edge_lag == start[rp.edge_dst]
        bind_src[rp.edge_dst[hit]] = rp.edge_src[hit]
    # collectives that ended at the last rank's arrival + transfer: jump to that rank
    cg = g.coll_group
    last_rank = np.full(n, -1, dtype=np.int64)
    if (cg >= 0).any():
        m = cg >= 0
        order = np.lexsort((start[m], cg[m]))
        grp_sorted = cg[m][order]
        last_of = np.full(int(cg.max()) + 1, -1, dtype=np.int64)
        last_of[grp_sorted] = idx[m][order]  # the latest start of each group wins
        last_rank[m] = last_of[cg[m]]
    floor_bound = (last_rank >= 0) & (last_rank != idx) & (end > start + np.maximum(g.coll_tail, 0))
    # syncs whose return the GPU op they waited on decided (not the host's own schedule)
    hs = g.syncs
    sync_bound = np.zeros(max(hs.n, 1), dtype=bool)
    if hs.n:
        u = offsets(hs, end, rp.shift)
        sync_bound[:] = u == end[hs.w] + hs.wake - hs.end
    # runs of chain-bound ops are contiguous: walk them in one step
    boundary = ~chain_bound | np.r_[False, floor_bound[:-1]]
    head = np.maximum.accumulate(np.where(boundary, idx, 0))
    lag_cs = np.r_[0, np.cumsum(np.where(chain_bound, start - prev_end, 0))]
    return _Bindings(
        prev_end,
        chain_bound,
        host_bound,
        bind_src,
        last_rank,
        floor_bound,
        sync_bound,
        head,
        lag_cs,
    )


def _sinks(g: ReplayGraph, end: np.ndarray, spans: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Where each cycle's walk begins: the op ending last on the cycle's critical device (the
    first such op; ops are sorted by cycle), and the start of that device's span."""
    crit_dev = np.full(len(g.cycle_labels), -1, dtype=np.int64)
    crit_dev[spans["c"].to_numpy()] = spans["dev"].to_numpy()
    span_s = np.zeros(len(g.cycle_labels), dtype=np.int64)
    span_s[spans["c"].to_numpy()] = spans["s"].to_numpy()
    on_crit = g.device == crit_dev[g.cycle]
    e_crit = np.where(on_crit, end, NEG)
    cstart = np.flatnonzero(np.r_[True, g.cycle[1:] != g.cycle[:-1]])
    cmax = np.maximum.reduceat(e_crit, cstart)
    is_sink = on_crit & (e_crit == cmax[g.cycle])
    first_sink = (
        is_sink
        & np.r_[True, (np.maximum.accumulate(np.where(is_sink, g.cycle, -1))[:-1] != g.cycle[1:])]
    )
    cur = np.flatnonzero(first_sink)
    return cur, span_s[g.cycle[cur]]


def _walk(
    g: ReplayGraph, rp: Replayed, b: _Bindings, cur: np.ndarray, s0: np.ndarray
) -> tuple[np.ndarray, dict[str, float]]:
    """Walk every cycle's path back from its sink at once, one binding per step. Returns each
    op's time on a path (ns, summed over cycles) and the idle on the paths by cause."""
    n = len(rp.start)
    start, end = rp.start, rp.end
    heads: list[np.ndarray] = []
    tails: list[np.ndarray] = []
    on_tail = np.zeros(n)
    idle = dict.fromkeys(IDLE, 0.0)
    for _ in range(n + 1):
        if len(cur) == 0:
            break
        fb = b.floor[cur]
        # floor-bound collectives: their transfer after the last arrival, then the last rank's start
        on_tail[cur[fb]] += (end[cur[fb]] - start[b.last_rank[cur[fb]]]).clip(min=0)
        at_start = np.where(fb, b.last_rank[cur], -1)
        # others: the whole run up to its head
        cr = cur[~fb]
        h = b.head[cr]
        heads.append(h)
        tails.append(cr + 1)
        idle["dispatch"] += float((b.lag_cs[cr + 1] - b.lag_cs[h + 1]).sum())
        at_start[~fb] = h
        # leave each start: via the stream predecessor (after a floor-bound op), an edge, the host
        x = at_start
        via_chain = b.chain[x]
        idle["dispatch"] += float((start[x] - b.prev_end[x])[via_chain].sum())
        hb = ~via_chain & (b.host[x] | (b.src[x] < 0))
        # a launch after a sync that waited on the GPU: the path goes on through that GPU op
        k = g.syncs.op_win[x]
        vs = hb & (k >= 0) & b.sync[np.maximum(k, 0)]
        w_of = g.syncs.w[np.maximum(k, 0)] if g.syncs.n else np.full(len(x), -1)
        idle["sync"] += float((start[x[vs]] - end[w_of[vs]]).clip(min=0).sum())
        hb &= ~vs
        idle["host"] += float((start[x[hb]] - s0[hb]).clip(min=0).sum())
        ve = ~via_chain & ~hb & ~vs
        idle["cross"] += float((start[x[ve]] - end[b.src[x[ve]]]).clip(min=0).sum())
        nxt = np.where(via_chain, x - 1, np.where(ve, b.src[x], np.where(vs, w_of, -1)))
        keep = nxt >= 0
        cur, s0 = nxt[keep], s0[keep]
    # ops on a path: inside some [run head, op] range (one difference array for all ranges)
    diff = np.bincount(
        np.concatenate(heads or [np.zeros(0, np.int64)]), minlength=n + 1
    ) - np.bincount(np.concatenate(tails or [np.zeros(0, np.int64)]), minlength=n + 1)
    busy = (end - start).astype(np.float64)
    on = np.where(np.cumsum(diff[:-1]) > 0, busy, 0.0) + on_tail
    return on, idle


def _summary(
    g: ReplayGraph, on: np.ndarray, idle: dict[str, float], spans: pl.DataFrame, top: int
) -> pl.DataFrame:
    """Time on the paths per (kind, name, phase) and per idle cause, per cycle and as a share of
    the replayed span; the `top` largest."""
    t_key = np.bincount(g.key, weights=on, minlength=g.keys.height)
    per = g.keys.select("kind", pl.col("contributor").alias("name"), "phase").with_columns(
        pl.Series("t", t_key)
    )
    per = per.filter(pl.col("t") > 0).group_by("kind", "name", "phase").agg(pl.col("t").sum())
    extra = pl.DataFrame(
        {
            "kind": ["gap"] * len(idle),
            "name": [IDLE[k] for k in idle],
            "phase": ["-"] * len(idle),
            "t": [idle[k] for k in idle],
        }
    )
    per = pl.concat([per, extra.filter(pl.col("t") > 0)], how="vertical_relaxed")
    total = float(spans["span"].sum())
    # divided in numpy: polars divides a column by a number as a product with its inverse, or
    # exactly in a one-row chunk, so the last digit followed the chunks (and the thread count)
    t = per["t"].to_numpy()
    return (
        per.select("kind", "name", "phase")
        .with_columns(
            pl.Series("ms_per_cycle", t / 1e6 / spans.height),
            pl.Series("share", t / total),
        )
        .sort("ms_per_cycle", "kind", "name", "phase", descending=[True, False, False, False])
        .head(top)  # ties by name: the same rows in the same order every run
    )
