"""Replay HEAD's cycles on its dependency graph, with selected durations taken from BASE.

Stage: replay (the simulation). Input: a `ReplayGraph` (graph.py) and the contributors taken
from BASE (attribution row numbers); output: a `Replayed`, every op's replayed start and end.
whatif.py turns replays into predictions.

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
sum of `d_{i-1} + s_i`: one segmented cumsum and one segmented cumulative max (segscan.py) over
all chains at once. Cross-stream edges, collective arrivals and host syncs couple chains; they are
folded into R and the sweep repeats until nothing moves (as many sweeps as such hops on the
longest dependency path).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.base.segscan import seg_cummax, seg_cumsum
from tracediff.replay.order import NEG
from tracediff.replay.syncs import offsets
from tracediff.replay.types import Replayed, ReplayGraph

__all__ = ["MAX_SWEEPS", "replay", "sweep"]

MAX_SWEEPS = 10_000


# ---------------------------------------------------------------- sweep


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
    seg = np.cumsum(first) - 1
    return _Chains(first, seg, seg_cumsum(w, seg), d, s)


def _solve(ch: _Chains, rr: np.ndarray) -> np.ndarray:
    """Starts of one sweep: start_i = max(rr_i, start_{i-1} + d_{i-1} + s_i) on every chain."""
    start: np.ndarray = ch.c + seg_cummax(rr - ch.c, ch.seg, ch.first, overwrite=True)
    return start


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


# ---------------------------------------------------------------- inputs


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
            shift[p] = seg_cumsum(delta[p], g.host[p])
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


def replay(
    g: ReplayGraph, chosen: np.ndarray | None = None, all_selected: bool = False
) -> Replayed:
    """Replay every cycle of HEAD with the chosen contributors taken from BASE."""
    chosen = np.zeros(0, dtype=np.int64) if chosen is None else np.asarray(chosen, dtype=np.int64)
    d, r, s, tail, esrc, edst, elag, shift = _inputs(g, chosen, all_selected)
    start, end, k, r_final = sweep(g, d, r, s, tail, esrc, edst, elag, shift)
    return Replayed(start, end, k, r_final, s, esrc, edst, elag, shift)
