"""Host syncs inside a cycle: where HEAD's host waited for the GPU before launching more.

Stage: replay input. Input: HEAD's ops in chain order (graph.py's frame) and HEAD's API calls;
output: `HostSyncs`, the sync windows of each host thread and which ops each one gates.

Host time is fixed between syncs, but a sync (cudaDeviceSynchronize, cudaStreamSynchronize,
cudaEventSynchronize, a synchronous cudaMemcpy, or a run of cudaEventQuery/cudaStreamQuery polls)
returns when the GPU work it waits for is done. If that work finishes earlier or later in the
replay, so does the sync, and with it every launch the thread makes afterwards in the cycle:

    end'_k = max(start'_k, end'(W_k)) + wake_k,   shift_k = end'_k - end_k

W_k is the op that ended last on the thread's GPUs before the sync returned; wake_k the measured
time from "ready" (the later of the sync's start and W_k's end) to the return. The shifts chain
along a thread's syncs (a max-plus recurrence), solved for all threads at once by `offsets`,
which the sweep (simulate.py) and the critical path (path.py) call.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from tracediff.base.segscan import seg_cummax, seg_cumsum
from tracediff.replay.types import HostSyncs

BLOCKING = re.compile(
    r"^(cuda(Device|Stream|Event|Thread)Synchronize|cu(Ctx|Stream|Event)Synchronize"
    r"|cudaMemcpy|cudaMemcpy2D|cudaMemcpyFromSymbol|cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?)$"
)
POLLS = ("cudaEventQuery", "cudaStreamQuery", "cuEventQuery", "cuStreamQuery")
POLL_GAP_NS = 50_000
"""Polls of one thread closer than this form one waiting loop (one sync window)."""


def none(n_ops: int) -> HostSyncs:
    """No sync windows (every op: -1)."""
    z = np.zeros(0, dtype=np.int64)
    return HostSyncs(z, z, z, z, z, z, np.full(n_ops, -1, dtype=np.int64))


def _windows(api: pl.DataFrame) -> pl.DataFrame:
    """process_id, thread_id, start_ns, end_ns of blocking calls and of polling loops."""
    calls = api.select(
        "process_id", "thread_id", "start_ns", "end_ns", pl.col("name").cast(pl.String)
    ).filter(pl.col("name").str.contains(BLOCKING.pattern) | pl.col("name").is_in(POLLS))
    if calls.height == 0:
        return calls.drop("name")
    calls = calls.sort("process_id", "thread_id", "start_ns")
    poll = pl.col("name").is_in(POLLS)
    same_thread = (pl.col("process_id") == pl.col("process_id").shift(1)) & (
        pl.col("thread_id") == pl.col("thread_id").shift(1)
    )
    joined = (
        poll
        & poll.shift(1).fill_null(False)
        & same_thread.fill_null(False)
        & (pl.col("start_ns") - pl.col("end_ns").shift(1) <= POLL_GAP_NS)
    )
    return (
        calls.with_columns((~joined).cum_sum().alias("_run"))
        .group_by("_run")
        .agg(
            pl.col("process_id").first(),
            pl.col("thread_id").first(),
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
        )
        .drop("_run")
    )


_BY = ["process_id", "thread_id"]


def find_syncs(h: pl.DataFrame, api: object, host: np.ndarray) -> HostSyncs:
    """Sync windows that lie inside a cycle with launches after them. `h`: graph.py's op frame
    (chain order; `_i`, `_cyc`, `_o` the cycle origin, relative `launch_start_ns`/`end_ns`)."""
    n = h.height
    if api is None:
        return none(n)
    api_df = api if isinstance(api, pl.DataFrame) else pl.from_arrow(api)
    assert isinstance(api_df, pl.DataFrame)
    if api_df.height == 0:
        return none(n)
    win = _windows(api_df)
    if win.height == 0:
        return none(n)
    launches = _launches(h, host)
    win = _inside_cycles(win, launches)
    if win.height == 0:
        return none(n)
    win = _waited_for(win, h)
    if win.height == 0:
        return none(n)
    # each op: the thread's last window that returned before the op's launch, in the same cycle
    k = launches.join_asof(
        win.select("_k", *_BY, pl.col("_cp").alias("_wc"), pl.col("end_ns").alias("_we2")).sort(
            "_we2"
        ),
        left_on="_la",
        right_on="_we2",
        by=_BY,
        strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("_k").is_not_null() & (pl.col("_wc") == pl.col("_cyc")))
    op_win = np.full(n, -1, dtype=np.int64)
    op_win[k["_i"].to_numpy()] = k["_k"].to_numpy().astype(np.int64)

    def col(c: str) -> np.ndarray:
        return win[c].to_numpy().astype(np.int64)

    return HostSyncs(
        host=col("_host"),
        start=col("_s"),
        end=col("_e"),
        wake=col("_wake"),
        w=col("_w"),
        prev_op=col("_prev"),
        op_win=op_win,
    )


def _launches(h: pl.DataFrame, host: np.ndarray) -> pl.DataFrame:
    """Each op's launch: `_i`, `_cyc`, process, thread, absolute launch start `_la` and the
    host chain `_host` it is on, in launch order (ops without a launch record left out)."""
    return (
        h.select(
            "_i",
            "_cyc",
            "process_id",
            "launch_thread_id",
            (pl.col("launch_start_ns") + pl.col("_o")).alias("_la"),
            pl.Series("_host", host),
        )
        .filter(pl.col("_la").is_not_null())
        .rename({"launch_thread_id": "thread_id"})
        .sort("_la")
    )


def _inside_cycles(win: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """The windows with a launch of their thread before them (`_prev`, its cycle `_cp`, its
    `_host`) and one after them in the same cycle."""
    win = (
        win.sort("start_ns")
        .join_asof(
            launches.rename({"_i": "_prev", "_cyc": "_cp"}).select(
                "_prev", "_cp", "_host", *_BY, "_la"
            ),
            left_on="start_ns",
            right_on="_la",
            by=_BY,
            strategy="backward",
            check_sortedness=False,
        )
        .drop("_la")
    )
    win = (
        win.sort("end_ns")
        .join_asof(
            launches.select(pl.col("_cyc").alias("_cn"), *_BY, "_la"),
            left_on="end_ns",
            right_on="_la",
            by=_BY,
            strategy="forward",
            check_sortedness=False,
        )
        .drop("_la")
    )
    return win.filter(pl.col("_cp").is_not_null() & (pl.col("_cp") == pl.col("_cn")))


def _waited_for(win: pl.DataFrame, h: pl.DataFrame) -> pl.DataFrame:
    """The windows with the op each waited for (`_w`: the last to end on the process's GPUs
    before the sync returned), the wake-up after it (`_wake`), the window relative to its cycle
    (`_s`, `_e`), in host-chain order and numbered (`_k`)."""
    ends = h.select(
        pl.col("_i").alias("_w"),
        pl.col("_cyc").alias("_cp"),
        "process_id",
        (pl.col("end_ns") + pl.col("_o")).alias("_we"),
        pl.col("_o"),
    ).sort("_we")
    win = win.sort("end_ns").join_asof(
        ends,
        left_on="end_ns",
        right_on="_we",
        by=["_cp", "process_id"],
        strategy="backward",
        check_sortedness=False,
    )
    return (
        win.filter(pl.col("_w").is_not_null())
        .with_columns(
            (pl.col("end_ns") - pl.max_horizontal("start_ns", "_we"))
            .clip(lower_bound=0)
            .alias("_wake"),
            (pl.col("start_ns") - pl.col("_o")).alias("_s"),
            (pl.col("end_ns") - pl.col("_o")).alias("_e"),
        )
        .sort("_host", "start_ns")
        .with_row_index("_k")
    )


def offsets(hs: HostSyncs, end: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """How far each window's return moves (u_k), given the replayed op ends and the host's own
    speed-up `shift` (cumulative idle taken away before each op, graph order)."""
    seg = hs.host
    first = np.r_[True, seg[1:] != seg[:-1]]
    at = shift[hs.prev_op]
    d_shift = at - np.where(first, 0, np.r_[0, at[:-1]])
    a = hs.start + hs.wake - hs.end - d_shift
    b = end[hs.w] + hs.wake - hs.end
    c = seg_cumsum(a, seg)
    m = seg_cummax(b - c, np.cumsum(first) - 1, first, overwrite=True)
    u: np.ndarray = c + np.maximum(0, m)
    return u
