"""Cross-stream CUDA event edges on the timeline: where one stream waited on another's work.

Stage: presentation (headless: no textual). Input: the comparison's aligned ops
(`replay_inputs.ops`, absolute times and launch calls of both sides) and each side's
`cuda_events` table (`replay_inputs.base_events`, `replay_inputs.head_events`); output:
per (side, cycle), the edges placed into the terminal columns of a window.

The edges are exactly what-if's (`replay.events.trace_edges`): a cudaStreamWaitEvent links the
first op enqueued on the waiting stream after the wait call (the *target*) to the op of the
recording stream that ends last among those enqueued before the matching cudaEventRecord (the
*source*). The timeline marks the source's end on the recording lane (when the event completed)
and the target's start on the waiting lane (when the waiting stream went on), each in the column
that holds that time. A target that started within `WAITED_NS` of its source's end waited on it;
one that started later was held by something else (its own stream, usually).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison
from tracediff.replay.events import EVENT_WAIT_TOL_NS, trace_edges

SIDES = ("base", "head")
WAITED_NS = EVENT_WAIT_TOL_NS
"""A target that started within this of its source's end is drawn as having waited on it."""
_SIDE_SHIFT = 40  # sort key: side << 40 | cycle


@dataclass
class EdgeMarks:
    """One side-cycle's edges with an end in a window, in order of the target's start. Columns are
    -1 where that end lies outside the window. `index`: the edge's place among all edges of the
    side-cycle (by unwarped target start), so its label stays when the window moves."""

    index: np.ndarray
    cycle_waited: np.ndarray  # `waited` of every edge of the side-cycle, by `index`
    src_lane: np.ndarray  # lane of the recording stream
    src_col: np.ndarray
    dst_lane: np.ndarray  # lane of the waiting stream
    dst_col: np.ndarray
    waited: np.ndarray  # bool: the target started within WAITED_NS of the source's end
    src_ns: np.ndarray  # the times placed (ns from the cycle's start; warped when aligned)
    dst_ns: np.ndarray


def _side_edges(
    ops: pl.DataFrame, side: str, events: object, starts: pl.DataFrame
) -> pl.DataFrame | None:
    o = ops.filter(pl.col("side") == side).select(
        "cycle", "device_id", "process_id", "stream_id", "start_ns", "end_ns", "launch_start_ns"
    )
    if o.height == 0:
        return None
    o = o.with_row_index("_i").with_columns(pl.col("_i").cast(pl.Int64))
    h = o.select(
        "_i",
        pl.col("cycle").alias("_cyc"),  # edges never cross a cycle
        pl.lit(0, pl.Int64).alias("_o"),  # times stay absolute, like the API calls'
        "process_id",
        "stream_id",
        "start_ns",
        "end_ns",
        "launch_start_ns",
    )
    tr, _ = trace_edges(h, events)
    if tr.height == 0:
        return None
    c0 = starts.filter(pl.col("side") == side).drop("side")
    dst = o.select("_i", "cycle", "device_id", "stream_id", "start_ns")
    src = o.select(
        pl.col("_i").alias("_src"),
        pl.col("device_id").alias("src_device_id"),
        pl.col("stream_id").alias("src_stream_id"),
        pl.col("end_ns").alias("src_end_ns"),
    )
    return (
        tr.join(dst, on="_i")
        .join(src, on="_src")
        .join(c0, on=["cycle", "device_id"], how="left")
        .join(  # trace_edges links ops of one cycle only
            c0.rename({"device_id": "src_device_id", "_c0": "_s0"}),
            on=["cycle", "src_device_id"],
            how="left",
        )
        .select(
            pl.lit(side).alias("side"),
            "cycle",
            pl.col("src_device_id"),
            pl.col("src_stream_id"),
            (pl.col("src_end_ns") - pl.col("_s0")).alias("src_rel_ns"),
            pl.col("device_id").alias("dst_device_id"),
            pl.col("stream_id").alias("dst_stream_id"),
            (pl.col("start_ns") - pl.col("_c0")).alias("dst_rel_ns"),
            pl.col("_gap").alias("gap_ns"),
        )
        .drop_nulls(["src_rel_ns", "dst_rel_ns"])
    )


def _edge_frame(c: Comparison, lane_ids: pl.DataFrame, traced: dict[str, bool]) -> pl.DataFrame:
    """Both sides' edges with their lanes, sorted by (side, cycle), then the target's start."""
    inputs = c.replay_inputs
    ops = inputs.ops
    if not isinstance(ops, pl.DataFrame) or ops.height == 0:
        return pl.DataFrame()
    starts = c.cycles.select(
        pl.col("side").cast(pl.String), "cycle", "device_id", pl.col("start_ns").alias("_c0")
    )
    ops = ops.with_columns(pl.col("side").cast(pl.String))
    frames = [
        f
        for s in SIDES
        if traced[s]
        and (f := _side_edges(ops, s, getattr(inputs, f"{s}_events"), starts)) is not None
    ]
    if not frames:
        return pl.DataFrame()
    lanes = lane_ids.select(
        pl.col("device_id").cast(pl.Int32), pl.col("stream_id").cast(pl.Int64), "_lane"
    )
    e = pl.concat(frames)
    for end in ("src", "dst"):
        e = e.join(
            lanes.rename(
                {
                    "device_id": f"{end}_device_id",
                    "stream_id": f"{end}_stream_id",
                    "_lane": f"{end}_lane",
                }
            ),
            on=[f"{end}_device_id", f"{end}_stream_id"],
            how="left",
        )
    side_key = (pl.col("side") == "head").cast(pl.Int64) * (1 << _SIDE_SHIFT) + pl.col("cycle")
    return (
        e.drop_nulls(["src_lane", "dst_lane"])
        .with_columns(side_key.alias("_key"))
        .sort("_key", "dst_rel_ns", "src_rel_ns")
    )


class EdgeIndex:
    """Every traced cross-stream edge of both sides, indexed by (side, cycle).

    Built once (in a worker of its own: on millions of ops linking the waits takes seconds) with
    polars joins; placing a cycle's edges into a window is a binary search and a few numpy
    operations, whatever the trace's size.
    """

    def __init__(self, c: Comparison, lane_ids: pl.DataFrame | None) -> None:
        """`lane_ids`: (device_id, stream_id, _lane) of the timeline's lanes; None: an empty
        index (edges not looked for yet)."""
        self.traced = {s: _has_rows(getattr(c.replay_inputs, f"{s}_events")) for s in SIDES}
        e = pl.DataFrame()
        if lane_ids is not None and any(self.traced.values()):
            e = _edge_frame(c, lane_ids, self.traced)
        self.frame = e

        def col(name: str, dtype: type) -> np.ndarray:
            return e[name].to_numpy().astype(dtype) if e.height else np.zeros(0, dtype)

        self.key = col("_key", np.int64)
        self.src_lane, self.dst_lane = col("src_lane", np.int64), col("dst_lane", np.int64)
        self.src_dev = col("src_device_id", np.int64)
        self.dst_dev = col("dst_device_id", np.int64)
        self.src_ns, self.dst_ns = col("src_rel_ns", np.float64), col("dst_rel_ns", np.float64)
        self.waited = col("gap_ns", np.int64) <= WAITED_NS

    @property
    def total(self) -> int:
        return int(self.key.size)

    def _range(self, side: str, cycle: int) -> tuple[int, int]:
        k = (SIDES.index(side) << _SIDE_SHIFT) + cycle
        return (
            int(np.searchsorted(self.key, k, "left")),
            int(np.searchsorted(self.key, k, "right")),
        )

    def count(self, side: str, cycle: int) -> int | None:
        """Edges of one side-cycle (None: that side's run has no CUDA event table)."""
        if not self.traced[side]:
            return None
        lo, hi = self._range(side, cycle)
        return hi - lo

    def place(
        self,
        side: str,
        cycle: int,
        t0: float,
        t1: float,
        width: int,
        warp: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> EdgeMarks:
        """The side-cycle's edges with an end in [t0, t1), each end in the column of its time.

        `warp` (head aligned to base): per GPU, the head → base time map the bars are drawn with.
        """
        lo, hi = self._range(side, cycle)
        src, dst = self.src_ns[lo:hi], self.dst_ns[lo:hi]
        if warp:
            src, dst = src.copy(), dst.copy()
            for d, (hx, bx) in warp.items():
                ms, md = self.src_dev[lo:hi] == d, self.dst_dev[lo:hi] == d
                src[ms], dst[md] = np.interp(src[ms], hx, bx), np.interp(dst[md], hx, bx)
            order = np.argsort(dst, kind="stable")  # the warp is monotone per GPU only
        else:
            order = np.arange(hi - lo)
        dt = max(t1 - t0, 1) / max(width, 1)
        # floor of (t - t0) / dt: the column whose [start, end) holds t, as the bars are bucketed
        sc = np.floor((src - t0) / dt).astype(np.int64)
        dc = np.floor((dst - t0) / dt).astype(np.int64)
        s_in, d_in = (sc >= 0) & (sc < width), (dc >= 0) & (dc < width)
        keep = order[(s_in | d_in)[order]]
        return EdgeMarks(
            index=keep,
            cycle_waited=self.waited[lo:hi],
            src_lane=self.src_lane[lo:hi][keep],
            src_col=np.where(s_in, sc, -1)[keep],
            dst_lane=self.dst_lane[lo:hi][keep],
            dst_col=np.where(d_in, dc, -1)[keep],
            waited=self.waited[lo:hi][keep],
            src_ns=src[keep],
            dst_ns=dst[keep],
        )


def _has_rows(table: object) -> bool:
    n = getattr(table, "num_rows", None)
    if n is None:
        n = getattr(table, "height", 0)
    return bool(n)


def mark_grid(marks: EdgeMarks, lanes: int, width: int) -> np.ndarray:
    """(lanes, width) int32: -1 = no mark, 2k = the record of the side-cycle's k-th edge, 2k + 1 =
    its wait. A later edge's mark overwrites an earlier one's in a shared cell."""
    grid = np.full((lanes, width), -1, dtype=np.int32)
    k = marks.index.astype(np.int32)
    s, d = marks.src_col >= 0, marks.dst_col >= 0
    grid[marks.src_lane[s], marks.src_col[s]] = 2 * k[s]
    grid[marks.dst_lane[d], marks.dst_col[d]] = 2 * k[d] + 1
    return grid
