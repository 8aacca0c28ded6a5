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
edges, collective arrivals and host syncs couple chains; they are folded into R and the sweep
repeats until nothing moves (as many sweeps as such hops on the longest dependency path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracediff.engine.result import KINDS, Comparison
from tracediff.errors import AnalysisError, UsageError
from tracediff.replay.graph import NEG, ReplayGraph, build
from tracediff.replay.host import offsets
from tracediff.replay.path import critical_path

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
            m = att.filter(
                (pl.col("kind") != "overlap") & pl.col("name").cast(pl.String).str.contains(pattern)
            )
        if m.height == 0:
            raise UsageError(
                f"--take {sel!r} matches no contributor",
                "see `tracediff compare --format table` for ids, kinds and names",
            )
        chosen |= set(m["contributor_id"].to_list())
    return att.filter(pl.col("contributor_id").is_in(sorted(chosen)))


# ---------------------------------------------------------------- sweep


def _seg_cummax(x: np.ndarray, seg: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative max of x restarting at each segment (segments contiguous, ids increasing).
    Works in place on `x` (callers pass a temporary)."""
    lo = x[first].min() if first.any() else x.min()
    np.maximum(x, lo, out=x)  # below every segment's first value: never the running max
    x -= lo
    span = int(x.max()) + 1
    nseg = int(seg[-1]) + 1 if len(seg) else 0
    if span * max(nseg, 1) < (1 << 62):
        off = seg * span  # lift each segment above the previous one: one global accumulate
        x += off
        np.maximum.accumulate(x, out=x)
        x -= off
        x += lo
        return x
    s = pl.DataFrame({"x": x + lo, "g": seg}).select(pl.col("x").cum_max().over("g"))
    return s["x"].to_numpy()


@dataclass
class _Chains:
    """What one replay keeps fixed across sweeps: C_i (running sum of d_{i-1} + s_i per chain)."""

    first: np.ndarray
    seg: np.ndarray  # chain index of each op
    c: np.ndarray
    d: np.ndarray
    s: np.ndarray


def _prepare(g: ReplayGraph, d: np.ndarray, s: np.ndarray) -> _Chains:
    first = g.first
    w = np.empty_like(d)
    w[1:] = d[:-1] + s[1:]
    w[0] = 0
    w[first] = 0
    cs = np.cumsum(w)
    seg = np.cumsum(first) - 1
    return _Chains(first, seg, cs - cs[first][seg], d, s)


def _solve(ch: _Chains, rr: np.ndarray) -> np.ndarray:
    """Starts of one sweep: start_i = max(rr_i, start_{i-1} + d_{i-1} + s_i) on every chain."""
    return ch.c + _seg_cummax(rr - ch.c, ch.seg, ch.first)


def sweep(
    g: ReplayGraph,
    d: np.ndarray,
    r: np.ndarray,
    s: np.ndarray,
    tail: np.ndarray,
    esrc: np.ndarray,
    edst: np.ndarray,
    elag: np.ndarray,
    shift: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """Replay to the fixed point. Returns (start, end, sweeps, the host's releases used last).

    Collective ends, cross edges and host syncs are sparse: each sweep folds them into the
    releases of the ops they hold back (the op after a collective on its stream; an edge's
    target; the launches after a sync) and solves the chains again, until no start moves. Each
    sweep settles one more level of the dependency DAG, so this ends (Jacobi on a DAG)."""
    cg = g.coll_group
    ci = np.flatnonzero(cg >= 0)  # collectives on >= 2 GPUs
    hs = g.syncs
    shift = np.zeros(len(d), dtype=np.int64) if shift is None else shift
    d_eff = d.copy()
    if len(ci):
        d_eff[ci] = np.maximum(tail[ci], 0)
    ch = _prepare(g, d_eff, s)
    start = _solve(ch, r)
    if len(esrc) == 0 and len(ci) == 0 and hs.n == 0:
        return start, start + d_eff, 1, r
    if len(ci):
        order = ci[np.argsort(cg[ci], kind="stable")]
        bounds = np.flatnonzero(np.r_[True, cg[order][1:] != cg[order][:-1]])
        grp_of = np.searchsorted(np.unique(cg[ci]), cg[ci])  # group row of each collective
        nxt = ci + 1  # the op after the collective on its stream, if any
        has_next = nxt < len(d)
        has_next[has_next] = ~g.first[nxt[has_next]]
        efloor_ci = np.full(len(ci), NEG, dtype=np.int64)
    gated = (hs.op_win >= 0) & (r > NEG)
    gate_k = hs.op_win[gated]
    for k in range(2, MAX_SWEEPS + 1):
        end = start + d_eff
        if len(ci):
            efloor_ci = np.maximum.reduceat(start[order], bounds)[grp_of] + tail[ci]
            end[ci] = np.maximum(end[ci], efloor_ci)
        rh = r.copy()  # the host's releases: launches after a sync move with it
        if hs.n:
            u = offsets(hs, end, shift)
            rh[gated] += u[gate_k] + shift[hs.prev_op[gate_k]]
        rr = rh.copy()
        if len(ci):  # a collective's end floor holds back the next op on its stream
            tgt = nxt[has_next]  # distinct ops: plain fancy indexing, no ufunc.at
            rr[tgt] = np.maximum(rr[tgt], end[ci][has_next] + s[tgt])
        if len(esrc):
            np.maximum.at(rr, edst, end[esrc] + elag)
        s2 = _solve(ch, rr)
        if np.array_equal(s2, start):
            end = s2 + d_eff
            if len(ci):
                end[ci] = np.maximum(end[ci], efloor_ci)
            return s2, end, k, rh
        start = s2
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
        return d, r, s, tail, esrc, edst, elag, np.zeros(len(d), dtype=np.int64)
    n = len(d)
    shift = np.zeros(n, dtype=np.int64)
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
    # an op that began while its device predecessor (on another stream) still ran had no idle
    # before it: there is no gap to take, and tying it behind that op would serialise streams
    take_g &= g.start >= g.end[np.maximum(g.devprev, 0)]
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
        gap_codes = np.flatnonzero(np.bincount(g.gid[g.gid >= 0], minlength=1))
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
    return d, r, s, tail, esrc, edst, elag, shift


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
    shift: np.ndarray  # host speed-up from idle taken away (cumulative per thread, graph order)


def replay(
    g: ReplayGraph, chosen: np.ndarray | None = None, all_selected: bool = False
) -> Replayed:
    """Replay every cycle of HEAD with the chosen contributors taken from BASE."""
    chosen = np.zeros(0, dtype=np.int64) if chosen is None else np.asarray(chosen, dtype=np.int64)
    d, r, s, tail, esrc, edst, elag, shift = _inputs(g, chosen, all_selected)
    start, end, k, r_final = sweep(g, d, r, s, tail, esrc, edst, elag, shift)
    return Replayed(start, end, k, r_final, s, esrc, edst, elag, shift)


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
    if chosen_df["name"].cast(pl.String).str.ends_with("[wait for last rank]").any():
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
    ops = (comparison.replay_inputs or {}).get("ops")
    if top.height == 0 or not isinstance(ops, pl.DataFrame) or ops.height == 0:
        return out  # nothing to replay (host-only runs): the report shows no what-if section
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
