"""Replay HEAD's cycles on its dependency graph, with selected durations taken from BASE.

Stage: replay. Input: a `Comparison` and selectors; output: a `WhatIf` (predicted mean cycle GPU
span, the change recovered, the new critical path).

What "taken from BASE" means (graph.py holds the BASE values):
- an op (kernel, copy, set, collective transfer): BASE's mean duration of the aligned instance
  (same slot on that GPU), else BASE's per-instance mean of its contributor; an op HEAD added
  (no slot, no BASE instance) is removed. A template op HEAD lacks is put back before the next op.
- idle (gap contributors): HEAD's idle before each selected op is scaled so that per cycle it
  sums to BASE's mean for that cause and phase; with every gap taken (`all`, `gap`), each op gets
  BASE's mean idle before the same slot. Idle removed is host time saved: the host's later
  launches in that cycle move earlier by as much (and later where BASE's host was slower).

The sweep is vectorised. Within a stream, `start_i = max(R_i, start_{i-1} + d_{i-1} + s_i)` is a
max-plus recurrence with the closed form `start_i = C_i + cummax_{k<=i}(R_k - C_k)`, C the running
sum of `d_{i-1} + s_i`: one cumsum and one cumulative max over all chains at once. Cross-stream
edges and collective arrivals couple chains; they are folded into R and the sweep repeats until
nothing moves (a monotone fixed point: as many sweeps as cross-stream hops on the longest path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracediff.engine.result import KINDS, Comparison
from tracediff.errors import AnalysisError, UsageError
from tracediff.replay.graph import NEG, ReplayGraph, build

MAX_SWEEPS = 10_000
UNALIGNED_WARN = 0.1
"""Warn when more than this share of HEAD's ops has no aligned BASE instance."""
SELECTABLE_KINDS = tuple(k for k in KINDS if k != "overlap")


@dataclass
class WhatIf:
    """The prediction. Times are ms per cycle (mean over HEAD's cycles)."""

    selectors: list[str]
    selected: pl.DataFrame  # contributor_id, kind, name, phase, device_id, delta_ms_per_cycle
    base_ms_per_cycle: float  # measured (compare's mean critical-device span)
    head_ms_per_cycle: float  # measured
    replayed_head_ms_per_cycle: float  # HEAD replayed with its own durations (model check)
    predicted_ms_per_cycle: float  # HEAD replayed with the selected durations from BASE
    recovered_ms_per_cycle: float  # replayed_head - predicted (> 0: faster)
    recovered_share: float | None  # recovered / (head - base): the part of the change explained
    critical_path: pl.DataFrame  # kind, name, phase, ms_per_cycle, share (of the predicted span)
    cycles: pl.DataFrame  # cycle, measured_ms, replayed_ms, predicted_ms
    sweeps: int
    warnings: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- selectors


def select(c: Comparison, selectors: list[str]) -> pl.DataFrame:
    """Attribution rows chosen by selectors: `all`, a kind, a contributor id (c3), `name:REGEX`,
    or a plain pattern (regex searched in contributor names)."""
    att = c.attribution
    if not selectors:
        raise UsageError(
            "nothing selected", "pass --take SELECTOR: all, a kind, an id like c3, or name:REGEX"
        )
    ids = set(att["contributor_id"].to_list())
    chosen: set[str] = set()
    for sel in selectors:
        s = sel.strip()
        if s.lower() == "all":
            m = att.filter(pl.col("kind") != "overlap")
        elif s.lower() in SELECTABLE_KINDS:
            m = att.filter(pl.col("kind") == s.lower())
        elif s.lower() == "overlap":
            raise UsageError(
                "overlap cannot be taken from base: it follows from the other durations",
                "take the ops whose overlap changed instead",
            )
        elif s in ids:
            m = att.filter(pl.col("contributor_id") == s)
            if m["kind"][0] == "overlap":
                raise UsageError(
                    f"{s} is the streams' overlap: it follows from the other durations",
                    "take the ops whose overlap changed instead",
                )
        else:
            pattern = s[len("name:") :] if s.startswith("name:") else s
            if re.fullmatch(r"c\d+", s):
                raise UsageError(
                    f"no contributor {s}", f"ids run c0..c{att.height - 1}; see `tracediff compare`"
                )
            try:
                re.compile(pattern)
            except re.error as e:
                raise UsageError(
                    f"--take {sel!r}: not a valid regular expression ({e})",
                    "escape special characters",
                ) from None
            m = att.filter((pl.col("kind") != "overlap") & pl.col("name").str.contains(pattern))
        if m.height == 0:
            raise UsageError(
                f"--take {sel!r} matches no contributor",
                "see `tracediff compare --format table` for ids, kinds and names",
            )
        chosen |= set(m["contributor_id"].to_list())
    return att.filter(pl.col("contributor_id").is_in(sorted(chosen)))


# ---------------------------------------------------------------- sweep


def _seg_cummax(x: np.ndarray, seg: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative max of x restarting at each segment (segments contiguous, ids increasing)."""
    lo = x[first].min() if first.any() else x.min()
    xc = np.maximum(x, lo)  # below every segment's first value: never the running max
    span = int(xc.max() - lo) + 1
    nseg = int(seg[-1]) + 1 if len(seg) else 0
    if span * max(nseg, 1) < (1 << 62):
        off = seg * span
        return np.maximum.accumulate(xc - lo + off) - off + lo
    s = pl.DataFrame({"x": xc, "g": seg}).select(pl.col("x").cum_max().over("g"))
    return s["x"].to_numpy()


def _chains(
    g: ReplayGraph, r: np.ndarray, d: np.ndarray, s: np.ndarray, efloor: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """One sweep over all chains:
    start_i = max(r_i, end_{i-1} + s_i), end_i = max(start_i + d_i, efloor_i)."""
    first = g.first
    if efloor is None:  # no collective across GPUs: ends are start + duration
        rr = r
    else:
        prev_floor = np.empty_like(efloor)
        prev_floor[1:] = efloor[:-1]
        prev_floor[0] = NEG
        rr = np.where(first, r, np.maximum(r, np.where(prev_floor > NEG, prev_floor + s, NEG)))
    w = np.empty_like(d)
    w[1:] = d[:-1] + s[1:]
    w[0] = 0
    w[first] = 0
    cs = np.cumsum(w)
    base = cs[first]
    seg_first = np.cumsum(first) - 1  # index of the chain among chains
    c = cs - base[seg_first]
    start = c + _seg_cummax(rr - c, seg_first, first)
    end = start + d if efloor is None else np.maximum(start + d, efloor)
    return start, end


def sweep(
    g: ReplayGraph,
    d: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    tail: np.ndarray,
    esrc: np.ndarray,
    edst: np.ndarray,
    elag: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Replay to the fixed point. Returns (start, end, number of sweeps)."""
    efloor: np.ndarray | None = None
    cg = g.coll_group
    in_coll = cg >= 0
    has_coll = bool(in_coll.any())
    ncg = int(cg.max()) + 1 if has_coll else 0
    d_eff = np.where(in_coll, np.maximum(tail, 0), d) if has_coll else d
    start, end = _chains(g, r, d_eff, s, efloor)
    if len(esrc) == 0 and not has_coll:
        return start, end, 1
    for k in range(2, MAX_SWEEPS + 1):
        r2 = r.copy()
        if len(esrc):
            np.maximum.at(r2, edst, end[esrc] + elag)
        if has_coll:
            last = np.full(ncg, NEG, dtype=np.int64)
            np.maximum.at(last, cg[in_coll], start[in_coll])
            efloor = np.where(in_coll, last[np.maximum(cg, 0)] + tail, NEG)
        s2, e2 = _chains(g, r2, d_eff, s, efloor)
        if np.array_equal(s2, start) and np.array_equal(e2, end):
            return s2, e2, k
        start, end = s2, e2
    raise AnalysisError(
        f"the replay did not settle after {MAX_SWEEPS} sweeps",
        "the dependency graph has a cycle; please report this trace",
    )


# ---------------------------------------------------------------- what-if


def _spans(g: ReplayGraph, start: np.ndarray, end: np.ndarray) -> pl.DataFrame:
    """Per cycle: span of the device that finishes last (ties: the longer span), as compare does.
    Ops are in chain order, so each (cycle, device) is a contiguous run: reduceat, no group-by."""
    seg = np.flatnonzero(
        np.r_[True, (g.cycle[1:] != g.cycle[:-1]) | (g.device[1:] != g.device[:-1])]
    )
    smin, emax = np.minimum.reduceat(start, seg), np.maximum.reduceat(end, seg)
    cyc, dev = g.cycle[seg], g.device[seg]
    span = emax - smin
    order = np.lexsort((-span, -emax, cyc))  # per cycle: latest end first, then longer span
    best = order[np.r_[True, cyc[order][1:] != cyc[order][:-1]]]
    return pl.DataFrame(
        {"c": cyc[best], "dev": dev[best], "s": smin[best], "e": emax[best], "span": span[best]}
    )


def _seg_cumsum(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Inclusive running sum of x restarting where `seg` changes (x, seg in the same order)."""
    cs = np.cumsum(x)
    starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
    before = np.r_[0, cs[starts[1:] - 1]] if len(starts) else np.zeros(0, dtype=cs.dtype)
    return cs - np.repeat(before, np.diff(np.r_[starts, len(x)]))


def _inputs(g: ReplayGraph, chosen: np.ndarray, all_selected: bool) -> tuple[np.ndarray, ...]:
    """Durations, releases, lags, tails and cross edges with the chosen contributors (codes:
    attribution row numbers) taken from BASE."""
    d, r, s, tail = g.dur.copy(), g.release.copy(), g.lag.copy(), g.coll_tail.copy()
    esrc, edst, elag = g.edge_src, g.edge_dst, g.edge_lag
    if len(chosen) == 0:
        return d, r, s, tail, esrc, edst, elag
    n = len(d)
    pick = np.zeros(
        max(int(chosen.max()), int(g.cid.max()), int(g.tid.max()), int(g.gid.max()), 0) + 2,
        dtype=bool,
    )
    pick[chosen] = True
    pick[-1] = False  # code -1: no contributor
    take_d = pick[g.cid] | pick[g.tid]
    has_base = g.base_dur >= 0
    # matched ops: BASE duration of the aligned instance; added ops taken from base: removed
    d = np.where(take_d & has_base, g.base_dur, d)
    removed = take_d & ~has_base
    d = np.where(removed, 0, d)
    s = np.where(removed, 0, s)
    tail = np.where(take_d & (g.base_tail >= 0), g.base_tail, np.where(removed, 0, tail))
    # gaps: the idle before the op becomes BASE's idle before the same slot
    if all_selected:
        take_g = np.ones(n, dtype=bool)
    else:
        take_g = pick[g.gid]
    take_g &= g.devprev >= 0
    # template slots missing from a HEAD cycle, taken from BASE: put back before the next op
    extra = np.zeros(n, dtype=np.int64)
    miss = g.missing
    if miss.height:
        sel = miss if all_selected else miss.filter(pl.col("_cid").is_in(chosen.tolist()))
        if sel.height:
            nxt = sel["_next"].to_numpy()
            gap_too = take_g[nxt]
            np.add.at(
                extra, nxt, sel["_bd"].to_numpy() + np.where(gap_too, sel["_bg"].to_numpy(), 0)
            )
    if take_g.any():
        # every gap contributor taken: BASE's idle slot by slot (its whole gap structure); some:
        # BASE's mean idle of the same cause and phase, as attribution groups them
        gap_codes = np.unique(g.gid[g.gid >= 0])
        by_slot = all_selected or bool(pick[gap_codes].all())
        if by_slot:
            gap = g.base_gap
        else:  # scaled so that, per cycle, they sum to BASE's mean for that cause and phase
            gap = np.round(g.gap_old * g.gap_scale[np.maximum(g.gid, 0)]).astype(np.int64)
        gap = np.where(removed, 0, gap)
        # the host got faster (or slower) by the idle taken away: shift its later launches
        delta = np.where(take_g & (g.host != 0), g.gap_old - gap, 0)
        if delta.any():
            p = g.host_perm
            shift = np.empty(n, dtype=np.int64)
            shift[p] = _seg_cumsum(delta[p], g.host[p])
            r = np.where((r > NEG) & (g.host != 0), r - shift, r)
        pred = np.arange(n) - 1
        local = take_g & ~g.first & (g.devprev == pred)
        s = np.where(local, gap, s)
        r = np.where(take_g, NEG, r)
        cross = take_g & ~local
        idx = np.flatnonzero(cross)
        s = np.where(cross & ~g.first, np.minimum(s, np.maximum(gap, 0)), s)
        esrc = np.concatenate([esrc, g.devprev[idx]])
        edst = np.concatenate([edst, idx])
        elag = np.concatenate([elag, gap[idx]])
    s = s + extra
    return d, r, s, tail, esrc, edst, elag


@dataclass
class Replayed:
    start: np.ndarray
    end: np.ndarray
    sweeps: int
    release: np.ndarray
    lag: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_lag: np.ndarray


def replay(
    g: ReplayGraph, chosen: np.ndarray | None = None, all_selected: bool = False
) -> Replayed:
    """Replay every cycle of HEAD with the chosen contributors taken from BASE."""
    chosen = np.zeros(0, dtype=np.int64) if chosen is None else np.asarray(chosen, dtype=np.int64)
    d, r, s, tail, esrc, edst, elag = _inputs(g, chosen, all_selected)
    start, end, k = sweep(g, d, r, s, tail, esrc, edst, elag)
    return Replayed(start, end, k, r, s, esrc, edst, elag)


def predict(comparison: Comparison, selector: str | list[str], *, top: int = 10) -> WhatIf:
    """Predict HEAD's mean cycle time with the selected contributors' durations taken from BASE.

    `selector`: one selector or a list (`all`, a kind, an id such as "c3", "name:REGEX", a
    pattern). Cheap to call repeatedly: the graph is built once per comparison and cached.
    """
    sels = [selector] if isinstance(selector, str) else list(selector)
    chosen_df = select(comparison, sels)
    g = build(comparison)
    row = {cid: i for i, cid in enumerate(comparison.attribution["contributor_id"].to_list())}
    chosen = np.array([row[x] for x in chosen_df["contributor_id"].to_list()], dtype=np.int64)
    all_sel = any(s.strip().lower() == "all" for s in sels)
    own = g.stats.get("own")
    if not isinstance(own, Replayed):
        own = g.stats["own"] = replay(g)  # the same for every selector: replay it once
    rp = replay(g, chosen, all_sel)
    sp0, sp1 = _spans(g, own.start, own.end), _spans(g, rp.start, rp.end)
    measured = comparison.cycles.filter((pl.col("side") == "head") & pl.col("critical")).select(
        "cycle", "span_ns"
    )
    cyc = (
        pl.DataFrame({"c": np.arange(len(g.cycle_labels)), "cycle": g.cycle_labels})
        .join(sp0.select("c", pl.col("span").alias("_r")), on="c")
        .join(sp1.select("c", pl.col("span").alias("_p")), on="c")
        .join(measured, on="cycle", how="left")
        .select(
            "cycle",
            (pl.col("span_ns") / 1e6).alias("measured_ms"),
            (pl.col("_r") / 1e6).alias("replayed_ms"),
            (pl.col("_p") / 1e6).alias("predicted_ms"),
        )
        .sort("cycle")
    )
    replayed = float(cyc["replayed_ms"].to_numpy().mean())
    predicted = float(cyc["predicted_ms"].to_numpy().mean())
    recovered = replayed - predicted
    change = comparison.head.mean_ms - comparison.base.mean_ms
    warnings = []
    unaligned = float(g.stats.get("unaligned_share", 0.0))
    if unaligned > UNALIGNED_WARN:
        warnings.append(
            f"{100 * unaligned:.0f} % of head's ops are not aligned to base (their cycles differ "
            "in content); taken from base they are removed, so the prediction is only as good "
            "as the alignment: check --cycle"
        )
    if chosen_df["name"].str.ends_with("[wait for last rank]").any():
        warnings.append(
            "a collective's wait follows from the other ranks' timelines: "
            "take the straggler's ops instead"
        )
    return WhatIf(
        selectors=sels,
        selected=chosen_df.select(
            "contributor_id", "kind", "name", "phase", "device_id", "delta_ms_per_cycle", "status"
        ),
        base_ms_per_cycle=comparison.base.mean_ms,
        head_ms_per_cycle=comparison.head.mean_ms,
        replayed_head_ms_per_cycle=replayed,
        predicted_ms_per_cycle=predicted,
        recovered_ms_per_cycle=recovered,
        recovered_share=recovered / change if abs(change) > 1e-12 else None,
        critical_path=critical_path(g, rp, sp1, top),
        cycles=cyc,
        sweeps=rp.sweeps,
        warnings=warnings,
    )


# ---------------------------------------------------------------- critical path

_IDLE = {
    "host": "idle: waiting for the host to launch",
    "dispatch": "idle: gap after the previous op on the stream",
    "cross": "idle: waiting on another stream",
}


def critical_path(g: ReplayGraph, rp: Replayed, spans: pl.DataFrame, top: int) -> pl.DataFrame:
    """What each cycle's critical path is made of, summed over cycles: ops per contributor and
    the idle on the path. Walked back from the op that ends last on the critical device: an op
    whose start is bound by its stream predecessor leads to it, one bound by a cross edge to the
    edge's source, a collective that ended at the last rank's arrival to that rank, and a host
    release ends the walk (the time before it is host time). Shares are of the replayed span."""
    n = len(rp.start)
    start, end = rp.start, rp.end
    if n == 0 or spans.height == 0:
        return pl.DataFrame(
            schema={
                "kind": pl.String,
                "name": pl.String,
                "phase": pl.String,
                "ms_per_cycle": pl.Float64,
                "share": pl.Float64,
            }
        )
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
    # runs of chain-bound ops are contiguous: walk them in one step
    boundary = ~chain_bound | np.r_[False, floor_bound[:-1]]
    head = np.maximum.accumulate(np.where(boundary, idx, 0))
    busy = (end - start).astype(np.float64)
    lag_cs = np.r_[0, np.cumsum(np.where(chain_bound, start - prev_end, 0))]
    # sinks: the op ending last on each cycle's critical device (ops are sorted by cycle)
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
    s0 = span_s[g.cycle[cur]]
    diff = np.zeros(n + 1)
    on_tail = np.zeros(n)
    idle = dict.fromkeys(_IDLE, 0.0)
    for _ in range(n + 1):
        if len(cur) == 0:
            break
        fb = floor_bound[cur]
        # floor-bound collectives: their transfer after the last arrival, then the last rank's start
        on_tail[cur[fb]] += (end[cur[fb]] - start[last_rank[cur[fb]]]).clip(min=0)
        at_start = np.where(fb, last_rank[cur], -1)
        # others: the whole run up to its head
        cr = cur[~fb]
        h = head[cr]
        diff += np.bincount(h, minlength=n + 1) - np.bincount(cr + 1, minlength=n + 1)
        idle["dispatch"] += float((lag_cs[cr + 1] - lag_cs[h + 1]).sum())
        at_start[~fb] = h
        # leave each start: via the stream predecessor (after a floor-bound op), an edge, the host
        x = at_start
        via_chain = chain_bound[x]
        idle["dispatch"] += float((start[x] - prev_end[x])[via_chain].sum())
        hb = ~via_chain & (host_bound[x] | (bind_src[x] < 0))
        idle["host"] += float((start[x[hb]] - s0[hb]).clip(min=0).sum())
        ve = ~via_chain & ~hb
        idle["cross"] += float((start[x[ve]] - end[bind_src[x[ve]]]).clip(min=0).sum())
        nxt = np.where(via_chain, x - 1, np.where(ve, bind_src[x], -1))
        keep = nxt >= 0
        cur, s0 = nxt[keep], s0[keep]
    on = np.where(np.cumsum(diff[:-1]) > 0, busy, 0.0) + on_tail
    t_key = np.bincount(g.key, weights=on, minlength=g.keys.height)
    per = g.keys.select("kind", pl.col("contributor").alias("name"), "phase").with_columns(
        pl.Series("t", t_key)
    )
    per = per.filter(pl.col("t") > 0).group_by("kind", "name", "phase").agg(pl.col("t").sum())
    extra = pl.DataFrame(
        {
            "kind": ["gap"] * 3,
            "name": [_IDLE[k] for k in idle],
            "phase": ["-"] * 3,
            "t": [idle[k] for k in idle],
        }
    )
    per = pl.concat([per, extra.filter(pl.col("t") > 0)], how="vertical_relaxed")
    total = float(spans["span"].sum())
    return (
        per.select(
            "kind",
            "name",
            "phase",
            (pl.col("t") / 1e6 / spans.height).alias("ms_per_cycle"),
            (pl.col("t") / total).alias("share"),
        )
        .sort("ms_per_cycle", descending=True)
        .head(top)
    )


def recover_top(comparison: Comparison, n: int = 5) -> pl.DataFrame:
    """For each of the top `n` contributors (by |change|, overlap excluded): HEAD's predicted mean
    cycle with only that contributor taken from BASE, and the time that recovers. One replay each
    (no critical path), so `compare --whatif` stays cheap.
    Columns: contributor_id, predicted_ms_per_cycle, recovered_ms_per_cycle."""
    att = comparison.attribution
    top = att.with_row_index("_code").filter(pl.col("kind") != "overlap").head(n)
    out = pl.DataFrame(
        schema={
            "contributor_id": pl.String,
            "predicted_ms_per_cycle": pl.Float64,
            "recovered_ms_per_cycle": pl.Float64,
        }
    )
    if top.height == 0:
        return out
    g = build(comparison)
    own = g.stats.get("own")
    if not isinstance(own, Replayed):
        own = g.stats["own"] = replay(g)
    base_mean = float(_spans(g, own.start, own.end)["span"].to_numpy().mean()) / 1e6
    rows = []
    for cid, code in zip(top["contributor_id"].to_list(), top["_code"].to_list(), strict=True):
        rp = replay(g, np.array([code], dtype=np.int64))
        pred = float(_spans(g, rp.start, rp.end)["span"].to_numpy().mean()) / 1e6
        rows.append((cid, pred, base_mean - pred))
    return pl.DataFrame(rows, schema=out.schema, orient="row")
