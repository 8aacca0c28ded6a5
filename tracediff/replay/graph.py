"""Dependency graph of HEAD's GPU ops, built from a `Comparison`, for what-if replay.

Stage: replay input. Input: a `Comparison` (its aligned ops and attribution); output: a
`ReplayGraph`: flat numpy arrays, one entry per HEAD op, sorted by chain (cycle, device, stream,
start), plus the BASE values an op takes when it is selected.

Model (times relative to each cycle's first GPU op, host time fixed):

    start_i = max(release_i, end_{stream pred} + lag_i, end_j + lag_ji for cross edges j -> i)
    end_i   = max(start_i + dur_i, last_arrival(collective instance of i) + tail_i)

- Order within a stream: each op follows its stream predecessor after `lag_i`, the measured
  GPU-side dispatch gap (the device's typical one where the op was host-bound).
- Host-bound ops (the launch call began, or was still running, when the stream went idle: the
  test attribute.py uses for gap causes) are released at their measured start: the host is
  fixed, so a faster GPU waits for it just the same. Ops launched early are released at
  `launch end + floor`, the device's launch-to-start latency floor measured on host-bound ops.
- CUDA-graph nodes run in their recorded order; only a graph launch's first node is released
  by the host (`cudaGraphLaunch` start + its floor); later nodes follow their predecessor.
- Cross-stream waits (events.py): each cudaStreamWaitEvent in the trace ties the first op
  enqueued after it on the waiting stream to the last op enqueued before the matching
  cudaEventRecord on the recording stream. Where the trace has no stream waits (or for CUDA-graph
  nodes), an op launched early whose start neither its stream predecessor nor the host explains
  is tied to the op of another stream that ended just before it (read off the timeline). Where
  nothing explains the start, the op keeps its measured start.
- Collectives on >= 2 GPUs: the k-th collective of a cycle on each GPU forms one instance; a
  rank ends no earlier than the last rank's arrival plus its own transfer time.
- Host syncs inside a cycle (syncs.py): launches after a cudaDeviceSynchronize / event wait /
  polling loop move with the GPU work the host waited for.

With HEAD's own durations every equation holds with equality at the measured times, so the
replay reproduces the measured timeline exactly (tests check the cycle spans).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine.result import OP_COLUMNS, Comparison
from tracediff.replay.contributors import (
    KEY,
    base_values,
    collectives,
    key_table,
    op_base_values,
)
from tracediff.replay.events import TRACE_NONE, cross_edges, targets, trace_edges
from tracediff.replay.order import (
    NEG,
    NO_EDGES,
    WAIT_TOL_NS,
    devprev_of,
    host_order,
    is_sorted,
    missing_slots,
)
from tracediff.replay.syncs import find_syncs
from tracediff.replay.types import ReplayGraph

__all__ = ["NEG", "ReplayGraph", "build", "replay_input"]

FLOOR_QUANTILE = 0.05
"""Launch-to-start latency floor: this quantile of host-bound ops' latency (robust to outliers)."""


_COLS = (
    "side",
    "cycle",
    *OP_COLUMNS,
    "kind",
    "phase",
    "slot",
    "contributor",
    "gap_ns",
    "gap_cause",
)


def replay_input(c: Comparison, name: str) -> Any:
    """One of the engine's inputs for the replay (a field of engine.result.ReplayInputs: "ops",
    "head_events", "head_api"), None where the comparison carries none."""
    return getattr(c.replay_inputs, name, None)


def _ops(c: Comparison) -> pl.DataFrame:
    ops = replay_input(c, "ops")
    if c.base.runs > 1 or c.head.runs > 1:
        raise AnalysisError(
            "what-if replays one run's timeline, and this comparison is of run sets "
            f"({c.base.runs} vs {c.head.runs} runs)",
            "compare one run per side (e.g. RUNSET/run-01/run.arrow) to replay it",
        )
    if not isinstance(ops, pl.DataFrame) or ops.height == 0:
        if (c.attribution["kind"] == "host").any() if "kind" in c.attribution.columns else False:
            raise AnalysisError(
                "these runs hold host ranges only, no GPU operations: no GPU timeline to replay",
                "capture with CUDA tracing on (nsys -t cuda,nvtx)",
            )
        raise AnalysisError(
            "this comparison carries no replay inputs",
            "compute it with tracediff.engine.compare.compare() of this version",
        )
    ops = ops.select(x for x in _COLS if x in ops.columns)
    return ops.with_columns(
        pl.col("device_id").cast(pl.Int32),
        # the engine keeps side/kind/status/gap cause as enums (one byte per op); joins here
        # meet plain strings
        *(pl.col(c).cast(pl.String) for c, t in ops.schema.items() if isinstance(t, pl.Enum)),
    )


def build(c: Comparison) -> ReplayGraph:
    """Build HEAD's replay graph (every call builds it: cache.graph_of keeps one per comparison).

    Phases, each a function below: HEAD's ops in chain order (`_head_ops`) and their chains
    (`_chains`: cycles, streams, times relative to the cycle, stream predecessor); host-bound
    ops and the launch-to-start floors (`_host_bound`); the cross-stream edges the trace records
    and each device's typical dispatch gap (`_dispatch_gaps`); releases, lags and the edges
    inferred from the timeline (`_releases`); BASE's values of each op
    (contributors.op_base_values); the arrays assembled with host order, syncs and missing slots
    (`_assemble`)."""
    ops = _ops(c)
    bv = base_values(ops.filter(pl.col("side") == "base"), c.attribution)
    h = _head_ops(ops)
    key, keys = key_table(h, c.attribution)
    keys = (
        keys.join(
            bv["cause"], on=["device_id", "phase", "gap_cause"], how="left", maintain_order="left"
        )
        .join(bv["contributor"], on="_cid", how="left", maintain_order="left")
        .sort("_k")
    )
    cg, tail = collectives(h)
    h, ch = _chains(h)
    h, floors = _host_bound(h)
    # cross-stream edges the trace records (events.py)
    events = replay_input(c, "head_events")
    trace, tr_stats = trace_edges(h, events) if ch.multi_stream else (TRACE_NONE, {})
    h = _dispatch_gaps(h, floors, trace)
    h, edges, ev_stats = _releases(h, trace, events, ch.multi_stream)
    base = op_base_values(h, keys, key, bv["slot"])
    return _assemble(
        c,
        h,
        ch,
        keys,
        key,
        (cg, tail),
        edges,
        base,
        missing_slots(h, bv["slot"]),
        {**tr_stats, **ev_stats},
    )


def _head_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """HEAD's ops in chain order (cycle, device, stream, start, end)."""
    h = ops.filter(pl.col("side") == "head").drop("side")
    if h.height == 0:
        raise AnalysisError("head has no GPU ops inside cycles", "nothing to replay")
    chain_order = ["cycle", "device_id", "stream_id", "start_ns", "end_ns"]
    if not is_sorted(h, chain_order):  # compare's ops usually are (one stream per GPU)
        h = h.sort(chain_order)
    return h


@dataclass
class _Chains:
    """Where cycles, devices and streams begin in chain order (numpy, one entry per op)."""

    cy: np.ndarray  # cycle number
    dv: np.ndarray  # device id
    new_cyc: np.ndarray  # bool: first op of its cycle
    new_dev: np.ndarray  # bool: first op of its (cycle, device)
    first: np.ndarray  # bool: first op of its chain (cycle, device, stream)
    cyc_d: np.ndarray  # dense cycle index

    @property
    def multi_stream(self) -> bool:
        """Some device runs several streams in a cycle (else no other stream to wait on)."""
        return bool((self.first & ~self.new_dev).any())


def _chains(h: pl.DataFrame) -> tuple[pl.DataFrame, _Chains]:
    """Chains, cycles and the stream predecessor, from the sort order (numpy: no window
    functions). Adds: _o (cycle origin), _cyc, _first, _i (row), _hostled (the host released it:
    not a later node of a CUDA-graph launch), _graph, times relative to the cycle's origin, _pe
    (stream predecessor's end), _slack (start - _pe)."""
    n = h.height
    cy, dv, st = (h[x].to_numpy() for x in ("cycle", "device_id", "stream_id"))
    new_cyc = np.r_[True, cy[1:] != cy[:-1]]
    new_dev = new_cyc | np.r_[True, dv[1:] != dv[:-1]]
    first = new_dev | np.r_[True, st[1:] != st[:-1]]
    cyc_d = np.cumsum(new_cyc) - 1
    s_abs, e_abs = h["start_ns"].to_numpy(), h["end_ns"].to_numpy()
    origin = np.minimum.reduceat(s_abs, np.flatnonzero(new_cyc))[cyc_d]
    pe = np.r_[0, e_abs[:-1]] - origin
    ls = h["launch_start_ns"].fill_null(NEG).to_numpy()
    lt = h["launch_thread_id"].fill_null(-1).to_numpy()
    is_g = (h["graph_node_id"].is_not_null() & h["launch_start_ns"].is_not_null()).to_numpy()
    # a graph launch's nodes are contiguous on their stream: its first node is the host's
    g_first = first | np.r_[True, ls[1:] != ls[:-1]] | np.r_[True, lt[1:] != lt[:-1]]
    h = (
        h.with_columns(
            pl.Series("_o", origin),
            pl.Series("_cyc", cyc_d),
            pl.Series("_first", first),
            pl.Series("_i", np.arange(n, dtype=np.int64)),
            pl.Series("_hostled", ~is_g | g_first),
            pl.Series("_graph", is_g),
        )
        .with_columns(
            *(
                pl.col(x) - pl.col("_o")
                for x in ("start_ns", "end_ns", "launch_start_ns", "launch_end_ns")
            ),
            pl.when(pl.col("_first")).then(None).otherwise(pl.Series("_pe", pe)).alias("_pe"),
        )
        .with_columns((pl.col("start_ns") - pl.col("_pe")).alias("_slack"))
    )
    return h, _Chains(cy, dv, new_cyc, new_dev, first, cyc_d)


def _host_bound(h: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Host-bound ops (_hb): the launch call began (or was still running) when the stream went
    idle. With each device's launch-to-start floor (_fl per device_id, _graph), measured on them."""
    late = (
        pl.col("_pe").is_null()
        | (pl.col("launch_start_ns") >= pl.col("_pe"))
        | (~pl.col("_graph") & (pl.col("launch_end_ns") > pl.col("_pe")))
    )
    h = h.with_columns(
        (pl.col("_hostled") & pl.col("launch_start_ns").is_not_null() & late).alias("_hb")
    )
    floors = (
        h.filter(pl.col("_hb") & ~pl.col("_first"))
        .group_by("device_id", "_graph")
        .agg(
            (
                pl.col("start_ns")
                - pl.when(pl.col("_graph"))
                .then(pl.col("launch_start_ns"))
                .otherwise(pl.col("launch_end_ns"))
            )
            .quantile(FLOOR_QUANTILE, "lower")
            .cast(pl.Int64)
            .alias("_fl")
        )
    )
    return h, floors


def _dispatch_gaps(h: pl.DataFrame, floors: pl.DataFrame, trace: Any) -> pl.DataFrame:
    """Each device's typical GPU-side dispatch gap (_typ: median slack of ops launched early)
    and launch floor (_fl) joined onto the ops; _tgt marks the targets of the trace's edges
    (their slack is that wait, not the dispatch gap, so it is left out of the typical gap)."""
    h = h.with_columns(pl.Series("_tgt", targets(trace, h.height)))
    typ = (
        h.filter(
            ~pl.col("_hb")
            & ~pl.col("_first")
            & pl.col("_hostled")
            & (pl.col("_slack") >= 0)
            & ~pl.col("_tgt")
        )
        .group_by("device_id")
        .agg(pl.col("_slack").median().cast(pl.Int64).alias("_typ"))
    )
    return (
        h.join(floors, on=["device_id", "_graph"], how="left", maintain_order="left")
        .join(typ, on="device_id", how="left", maintain_order="left")
        .with_columns(pl.col("_fl").fill_null(0), pl.col("_typ").fill_null(0))
    )


def _releases(
    h: pl.DataFrame, trace: Any, events: Any, multi_stream: bool
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, int]]:
    """Host releases (_r) and stream lags (_s) of every op, and the cross-stream edges (trace's,
    then inferred from the timeline: events.cross_edges). Also final _hb, _ux (launched early,
    start not explained by the stream predecessor) and _has_edge."""
    n = h.height
    a = pl.when(pl.col("_graph")).then(pl.col("launch_start_ns")).otherwise(
        pl.col("launch_end_ns")
    ) + pl.col("_fl")
    tol = pl.max_horizontal(pl.lit(WAIT_TOL_NS), 4 * pl.col("_typ"))
    # a stream's first op in the cycle released by the host well before it ran: waited on something
    launched = pl.col("_hostled") & pl.col("launch_start_ns").is_not_null()
    early_first = pl.col("_first") & launched & (a + tol < pl.col("start_ns"))
    h = h.with_columns(
        (pl.col("_hb") & ~pl.col("_first") | pl.col("_first") & launched & ~early_first).alias(
            "_hb"
        ),
        # launched early, but the stream predecessor does not explain the start: a cross-stream wait
        (
            (~pl.col("_hb") & ~pl.col("_first") & pl.col("_hostled") & (pl.col("_slack") > tol))
            | early_first
        ).alias("_ux"),
    )
    edges, has_edge, ev_stats = (
        cross_edges(h, trace, events)
        if multi_stream
        else (NO_EDGES, np.zeros(n, dtype=bool), {"wait_edges": 0})
    )
    h = h.with_columns(pl.Series("_has_edge", has_edge))
    pinned = (
        pl.col("_hb")
        | (pl.col("_first") & ~pl.col("_has_edge"))
        | (pl.col("_ux") & ~pl.col("_has_edge"))
        | (pl.col("_hostled") & pl.col("launch_start_ns").is_null() & (pl.col("_slack") > tol))
    )
    release = (
        pl.when(pinned)
        .then(pl.col("start_ns"))
        .when(pl.col("_hostled") & pl.col("launch_start_ns").is_not_null())
        .then(pl.min_horizontal(a, pl.col("start_ns")))
        .otherwise(pl.lit(NEG))
    )
    lag = (
        pl.when(pl.col("_first"))
        .then(0)
        .when(pinned | pl.col("_ux") | pl.col("_has_edge"))
        .then(pl.min_horizontal(pl.col("_slack"), pl.col("_typ")))
        .otherwise(pl.col("_slack"))
    )
    return h.with_columns(release.alias("_r"), lag.alias("_s")), edges, ev_stats


def _assemble(
    c: Comparison,
    h: pl.DataFrame,
    ch: _Chains,
    keys: pl.DataFrame,
    key: np.ndarray,
    coll: tuple[np.ndarray, np.ndarray],
    edges: pl.DataFrame,
    base: tuple[np.ndarray, np.ndarray, np.ndarray],
    missing: pl.DataFrame,
    edge_stats: dict[str, int],
) -> ReplayGraph:
    """The graph's arrays, with each op's device predecessor, host order and the host's syncs."""
    devprev = devprev_of(h, ch.first, ch.new_dev)
    # host threads: a gap taken from BASE makes the host that much faster for everything it
    # launches afterwards in the cycle (a chain of host-bound launches moves together)
    host, host_perm = host_order(h, ch.cyc_d)
    kc = {x: keys[x].to_numpy()[key] for x in ("_cid", "_tid", "_gid")}

    def col(x: str) -> np.ndarray:
        return h[x].to_numpy()

    return ReplayGraph(
        keys=keys.select("_k", *KEY, "_cid", "_tid", "_wid", "_gid"),
        key=key,
        cid=kc["_cid"],
        tid=kc["_tid"],
        gid=kc["_gid"],
        chain=np.cumsum(ch.first) - 1,
        first=ch.first,
        cycle=ch.cyc_d,
        device=ch.dv.astype(np.int64),
        start=col("start_ns"),
        end=col("end_ns"),
        dur=col("end_ns") - col("start_ns"),
        release=col("_r"),
        lag=col("_s"),
        devprev=devprev,
        edge_src=edges["_src"].to_numpy(),
        edge_dst=edges["_i"].to_numpy(),
        edge_lag=edges["_lag"].to_numpy(),
        coll_group=coll[0],
        coll_tail=coll[1],
        base_dur=base[0],
        base_tail=base[1],
        base_gap=base[2],
        gap_scale=c.attribution.select(
            pl.when((pl.col("kind") == "gap") & (pl.col("head_ms_per_cycle") > 0))
            .then(pl.col("base_ms_per_cycle") / pl.col("head_ms_per_cycle"))
            .otherwise(1.0)
        )
        .to_series()
        .to_numpy(),
        host=host,
        host_perm=host_perm,
        gap_old=col("gap_ns").astype(np.int64),
        missing=missing,
        syncs=find_syncs(h, replay_input(c, "head_api"), host),
        cycle_labels=ch.cy[ch.new_cyc],
        stats={
            "host_bound_ops": int(h["_hb"].sum()),
            "unaligned_share": float(h["slot"].is_null().to_numpy().mean()),
            # edges read from the trace's events (events.py), of which explain a start; edges
            # inferred (wait_edges)
            **edge_stats,
            # ops that waited on something the trace does not show (the device's first
            # op of each cycle excluded): they keep their measured start
            "pinned_unexplained": int(
                ((h["_ux"] & ~h["_has_edge"]).to_numpy() & (devprev >= 0)).sum()
            ),
        },
    )
