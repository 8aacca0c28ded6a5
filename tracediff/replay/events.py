"""Cross-stream edges read from the trace: CUDA event record on stream A -> stream wait on B.

Stage: replay input (used by graph.py). Input: graph.py's op frame (chain order; times relative
to the cycle origin `_o`) and HEAD's `cuda_events` table; output: edges `_src -> _i` with a lag,
and which processes the trace covers (where graph.py no longer infers waits from the timeline).

A stream wait orders work enqueued on the waiting stream after the cudaStreamWaitEvent call
behind the work enqueued on the recording stream before the matching cudaEventRecord call:

- the wait's record: the latest record of the same event (process, event id; or eventSyncId
  where the report has it) whose call began at or before the wait's call;
- source: among the recording stream's ops launched (call begun) at or before the record's call,
  the one that ends last (on one stream the last launched; for a CUDA graph, its last node);
- target: the first op enqueued on the waiting stream after the wait's call began.

Where the report gives the wait but not where its event was recorded (nsys 2024.2 writes no
CUDA_EVENT row for cudaEventRecordWithFlags, which torch calls), the record is the waiting
thread's last record call before the wait, and the recording stream is the one, among the
process's other streams, whose last op launched before that call ended last without ending
after the target started: exact with two streams, a timeline choice with more.

Streams are matched by (process, stream id), never by device: nsys 2026.2 writes deviceId 0 on
the synchronization rows of a process whose kernels run on device 1.

The lag of an edge is the measured gap between the source's end and the target's start where
the edge explains the start (gap within the wait tolerance); otherwise the target was held by
something else and the lag is the device's typical event-wait latency, so the edge binds in a
replay only once the source ends later than it did.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.replay.order import WAIT_TOL_NS, wait_edges


def _frame(events: object) -> pl.DataFrame | None:
    if events is None:
        return None
    df = pl.from_arrow(events) if isinstance(events, pa.Table) else events
    if not isinstance(df, pl.DataFrame) or df.height == 0:
        return None
    return df.with_columns(pl.col("action").cast(pl.String))


def traced_processes(events: object) -> pl.Series:
    """Processes whose stream waits the trace records: no timeline inference for their eager ops."""
    df = _frame(events)
    if df is None:
        return pl.Series("process_id", [], dtype=pl.Int64)
    return df.filter(pl.col("action") == "wait")["process_id"].unique()


def _link(waits: pl.DataFrame, records: pl.DataFrame) -> pl.DataFrame:
    """Each wait with its record's call time `_rt` and stream `_rs` (null: not in the report)."""
    known = records.filter(pl.col("stream_id").is_not_null() & pl.col("event_id").is_not_null())
    cols = ["process_id", "thread_id", "api_start_ns"]
    w = waits.select("_w", *cols, "stream_id", "event_id", "event_sync_id")
    by_sync = (
        w.filter(pl.col("event_sync_id").is_not_null())
        .join(
            known.filter(pl.col("event_sync_id").is_not_null()).select(
                "process_id",
                "event_sync_id",
                pl.col("api_start_ns").alias("_rt"),
                pl.col("stream_id").alias("_rs"),
            ),
            on=["process_id", "event_sync_id"],
        )
        .unique("_w", keep="last")
        .select("_w", "_rt", "_rs")
    )
    by_event = (
        w.filter(~pl.col("_w").is_in(by_sync["_w"].implode()))
        .sort("api_start_ns")
        .join_asof(
            known.select(
                "process_id",
                "event_id",
                pl.col("api_start_ns").alias("_rt"),
                pl.col("stream_id").alias("_rs"),
            ).sort("_rt"),
            left_on="api_start_ns",
            right_on="_rt",
            by=["process_id", "event_id"],
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_rt").is_not_null())
        .select("_w", "_rt", "_rs")
    )
    exact = pl.concat([by_sync, by_event])
    # no record of that event in the report: the thread's last record call before the wait
    rest = (
        w.filter(~pl.col("_w").is_in(exact["_w"].implode()))
        .sort("api_start_ns")
        .join_asof(
            records.filter(pl.col("thread_id").is_not_null())
            .select("process_id", "thread_id", pl.col("api_start_ns").alias("_rt"))
            .sort("_rt"),
            left_on="api_start_ns",
            right_on="_rt",
            by=["process_id", "thread_id"],
            strategy="backward",
            check_sortedness=False,
        )
        .select(
            "_w",
            pl.col("_rt").fill_null(pl.col("api_start_ns")),
            pl.lit(None, pl.Int64).alias("_rs"),
        )
    )
    return waits.join(pl.concat([exact, rest]), on="_w", how="left")


EVENT_WAIT_TOL_NS = 20_000
"""A target that nothing else explains and that starts within this of its traced source's end
waited on it. Event-wait latency on the H200 captures (tests/data/h200/twostream): 0.9-7.4 us."""
TRACE_SCHEMA = {"_i": pl.Int64, "_src": pl.Int64, "_gap": pl.Int64}
TRACE_NONE = pl.DataFrame(schema=TRACE_SCHEMA)


def _one_per_launch(ops: pl.DataFrame, by: str, first: bool) -> pl.DataFrame:
    """One op per (process, stream, launch time), the one with the lowest (first) or highest
    `by`: a CUDA graph launch enqueues its nodes at one time. In launch-time order, for as-of
    joins. (A sort and a shift mask: `unique(maintain_order=True)` costs 3x more.)"""
    key = ["process_id", "stream_id", "_la"]
    o = ops.sort(*key, by)
    same = pl.all_horizontal(pl.col(k) == pl.col(k).shift(1 if first else -1) for k in key)
    return o.filter(~same.fill_null(False)).sort("_la")


def trace_edges(h: pl.DataFrame, events: object) -> tuple[pl.DataFrame, dict[str, int]]:
    """Edges `_src -> _i` from the trace's event records and stream waits, with the measured
    `_gap` (target start - source end), and counts. `h`: graph.py's frame (columns `_i`,
    `_cyc`, `_o`, process and stream ids, start/end/launch times relative to `_o`)."""
    df = _frame(events)
    stats = {"event_waits": 0, "event_edges": 0, "event_edges_stream_from_timeline": 0,
             "event_waits_unmatched": 0, "event_edges_contradicted": 0}  # fmt: skip
    if df is None:
        return TRACE_NONE, stats
    waits = df.filter(
        (pl.col("action") == "wait")
        & pl.col("api_start_ns").is_not_null()
        & pl.col("stream_id").is_not_null()
    ).with_row_index("_w")
    stats["event_waits"] = waits.height
    if waits.height == 0:
        return TRACE_NONE, stats
    records = df.filter((pl.col("action") == "record") & pl.col("api_start_ns").is_not_null())
    w = _link(waits, records)
    ops = h.filter(pl.col("launch_start_ns").is_not_null()).select(
        "_i",
        "_cyc",
        "process_id",
        "stream_id",
        "start_ns",
        "end_ns",
        (pl.col("launch_start_ns") + pl.col("_o")).alias("_la"),
    )
    # target: the first op enqueued on the waiting stream after the wait call began
    first_after = _one_per_launch(ops, "start_ns", first=True)
    w = w.sort("api_start_ns").join_asof(
        first_after.select(
            "process_id",
            "stream_id",
            "_la",
            pl.col("_i").alias("_dst"),
            pl.col("_cyc").alias("_dc"),
            pl.col("start_ns").alias("_ds"),
        ),
        left_on="api_start_ns",
        right_on="_la",
        by=["process_id", "stream_id"],
        strategy="forward",
        check_sortedness=False,
    )
    w = w.filter(pl.col("_dst").is_not_null()).drop("_la")
    # source candidates: on the record's stream, or (record not placed) on each other stream
    last_before = _one_per_launch(ops, "end_ns", first=False)
    streams = ops.select("process_id", pl.col("stream_id").alias("_cs")).unique()
    placed = w.filter(pl.col("_rs").is_not_null()).with_columns(pl.col("_rs").alias("_cs"))
    unplaced = (
        w.filter(pl.col("_rs").is_null())
        .join(streams, on="process_id")
        .filter(pl.col("_cs") != pl.col("stream_id"))
    )
    cand = pl.concat([placed, unplaced.select(placed.columns)]).sort("_rt")
    cand = cand.join_asof(
        last_before.select(
            "process_id",
            pl.col("stream_id").alias("_cs"),
            pl.col("_la").alias("_sla"),
            pl.col("_i").alias("_src"),
            pl.col("_cyc").alias("_sc"),
            pl.col("end_ns").alias("_se"),
        ).sort("_sla"),
        left_on="_rt",
        right_on="_sla",
        by=["process_id", "_cs"],
        strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("_src").is_not_null() & (pl.col("_sc") == pl.col("_dc")))  # one origin
    # the target cannot start before its source ended: a placed record that says otherwise is
    # counted (a check on the rule above), an unplaced one only rules that stream out
    late = pl.col("_se") > pl.col("_ds")
    stats["event_edges_contradicted"] = cand.filter(pl.col("_rs").is_not_null() & late).height
    # a record the report did not place: the candidate that ended last
    # (sources ending at once: the later op, the same one every run)
    cand = cand.filter(~late).sort("_se", "_src").unique("_w", keep="last")
    stats["event_waits_unmatched"] = waits.height - cand.height
    stats["event_edges_stream_from_timeline"] = int(cand["_rs"].is_null().sum())
    # several waits can target one op (it waits on two streams): keep each distinct source
    out = cand.select(
        pl.col("_dst").alias("_i"), "_src", (pl.col("_ds") - pl.col("_se")).alias("_gap")
    ).unique(["_i", "_src"], keep="first")
    stats["event_edges"] = out.height
    return out.sort("_i", "_src"), stats


def targets(trace: pl.DataFrame, n: int) -> np.ndarray:
    """Per op: whether the trace says it waited on another stream."""
    out = np.zeros(n, dtype=bool)
    out[trace["_i"].to_numpy()] = True
    return out


def cross_edges(
    h: pl.DataFrame, trace: pl.DataFrame, events: object
) -> tuple[pl.DataFrame, np.ndarray, dict[str, int]]:
    """All cross-stream edges (`_i`, `_src`, `_lag`), which ops they explain, and counts.

    `trace`: trace_edges' edges. One explains its target's start where the gap is within the
    wait tolerance, or where nothing else explains the start (`_ux`) and the gap is within
    EVENT_WAIT_TOL_NS (or what the timeline inference accepts); its lag is then the gap.
    Otherwise something else held the target and the lag is the device's typical event-wait
    latency (median gap of the edges that explain a start), so the edge binds in a replay only
    once its source ends later than it did.

    The timeline inference (order.wait_edges) is kept for ops the trace says nothing about:
    processes with no stream wait in the trace (the report lacks the synchronization records, or
    a Kineto trace), and CUDA-graph nodes, whose dependencies inside the graph are never event
    records. An op an edge explains is released by it (graph.py)."""
    tol = pl.max_horizontal(pl.lit(EVENT_WAIT_TOL_NS), 4 * pl.col("_typ"))
    e = trace.join(h.select("_i", "device_id", "_ux", "_typ"), on="_i", how="left").with_columns(
        ((pl.col("_gap") <= WAIT_TOL_NS) | (pl.col("_ux") & (pl.col("_gap") <= tol))).alias("_bind")
    )
    typical = (
        e.filter(pl.col("_bind"))
        .group_by("device_id")
        .agg(pl.col("_gap").median().cast(pl.Int64).alias("_wl"))
    )
    e = e.join(typical, on="device_id", how="left")
    lag = (
        pl.when(pl.col("_bind"))
        .then(pl.col("_gap"))
        .otherwise(pl.min_horizontal(pl.col("_gap"), pl.coalesce("_wl", tol)))
    )
    ev = e.select("_i", "_src", lag.cast(pl.Int64).alias("_lag"), "_bind")
    traced = traced_processes(events)
    infer = (
        pl.col("_ux")
        & ~pl.Series(targets(trace, h.height))
        & (~pl.col("process_id").is_in(traced.implode()) | pl.col("_graph"))
    )
    inferred = wait_edges(h.with_columns(infer.alias("_ux")))
    explained = np.zeros(h.height, dtype=bool)
    explained[ev.filter(pl.col("_bind"))["_i"].to_numpy()] = True
    explained[inferred["_i"].to_numpy()] = True
    edges = pl.concat([ev.drop("_bind"), inferred.select("_i", "_src", "_lag")])
    stats = {"event_edges_binding": int(ev["_bind"].sum()), "wait_edges": inferred.height}
    return edges, explained, stats
