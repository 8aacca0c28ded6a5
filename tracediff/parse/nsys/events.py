"""Nsight Systems CUDA event records and stream waits → the run file's `cuda_events` table.

Stage: parse (nsys). Input: a `Source` (SQLite export or Parquet folder) and the run's
`api_calls` table, already read; output: `cuda_events`, one row per event record and per stream
wait, from which the what-if replay draws its cross-stream edges (replay/events.py).

The one place that knows CUPTI_ACTIVITY_KIND_CUDA_EVENT and the stream-wait rows of
CUPTI_ACTIVITY_KIND_SYNCHRONIZATION. What real exports hold (nsys 2024.2.3 captures of
capture/workload/twostream.py on an H200; nsys 2026.2 exports in tests/data/nsys/nsys-ai):

- CUDA_EVENT: one row per cudaEventRecord with the recording stream and `eventId`, the event
  itself (a re-recorded event keeps its id; waits name the same id). nsys 2024.2 writes none for
  cudaEventRecordWithFlags, which torch 2.11's Event.record calls, and 2026.2 exports may hold
  none at all: such records are kept from their API calls, with stream and event unknown (null).
  Newer schemas add `timestamp` (device-side completion, 0 when not collected) and `eventSyncId`.
- SYNCHRONIZATION: one row per sync call; `eventId` is the event waited on. `syncType` is not to
  be trusted: in 2024.2 (schema 3.11) cudaStreamWaitEvent rows carry 3 (labelled "Stream sync")
  and cudaEventQuery rows 2 ("Stream wait sync"); 2026.2 (3.25, which adds `deprecatedSyncType`)
  writes CUPTI's values, 2 and 1. So a wait is a row whose API call is cu(da)StreamWaitEvent;
  only where that call is missing, and the schema has `deprecatedSyncType`, does syncType 2 say so.
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.parse.nsys.columns import Strings, by_start, code_column, finish, pid_of, tid_of
from tracediff.parse.nsys.schema import ints
from tracediff.parse.nsys.tables import LaunchIndex, launch_rows

CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
TABLES_READ = (CUDA_EVENT, SYNC)
"""The raw tables this module reads (for `nsys export --tables`); reader.read_nsys reads
them with the others (SYNCHRONIZATION once, for the syncs table too) and hands the frames in."""

EVENT_COLS = ints(
    "deviceId", "streamId", "correlationId", "globalPid", "eventId", "eventSyncId", "timestamp"
)
SYNC_COLS = ints(
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType", "eventId",
    "eventSyncId",
)  # fmt: skip
RECORD_API = re.compile(r"^cu(da)?EventRecord")  # ...WithFlags, _ptsz variants too
WAIT_API = re.compile(r"^cu(da)?StreamWaitEvent")
CUPTI_ENUM_COLUMN = "deprecatedSyncType"  # present: syncType follows CUPTI's enum
_CUPTI_STREAM_WAIT = 2
_NO_ID = 0xFFFFFFFF  # CUPTI's "none" for stream and event ids
ACTIONS = ["record", "wait"]


def _name_ids(api_names: Strings, pattern: re.Pattern[str]) -> list[int]:
    """Ids of the API names that match (once per distinct name, never per call)."""
    words = api_names.values.to_pylist()
    pos = [i for i, w in enumerate(words) if w and pattern.match(w)]
    return pos if api_names.dense else api_names.ids[pos].tolist()


def _calls(api: pl.DataFrame, rec_ids: list[int], wait_ids: list[int]) -> pl.DataFrame:
    """The record and stream-wait API calls, picked by name id on the raw API frame; the name
    stays an id (`_nid`) until the table's few rows are final."""
    names = api["nameId"]
    if names.null_count():
        pick = names.is_in(rec_ids + wait_ids)
    else:  # a comparison per wanted name (usually 2-4) in numpy: ~1 ms for 1 M calls
        ids = names.to_numpy()
        hit = np.zeros(len(ids), bool)
        for i in rec_ids + wait_ids:
            hit |= ids == i
        pick = pl.Series(hit)
    cols = ["globalTid", "correlationId", "start", "end", "nameId"]
    df = by_start(api.select(cols).filter(pick))  # api_calls' order
    df = df.select(
        pid_of("globalTid").alias("process_id"),
        pl.col("correlationId").alias("correlation_id"),
        tid_of("globalTid").alias("thread_id"),
        pl.col("start").alias("api_start_ns"),
        pl.col("end").alias("api_end_ns"),
        pl.col("nameId").alias("_nid"),
        pl.col("nameId").is_in(rec_ids).alias("_rec"),
    ).filter(pl.col("correlation_id").is_not_null())
    if df["correlation_id"].n_unique() == df.height:  # ids unique: so are (process, id) pairs
        return df
    return df.unique(subset=["process_id", "correlation_id"], keep="first", maintain_order=True)


def _id(col: str) -> pl.Expr:
    return pl.when(pl.col(col) != _NO_ID).then(pl.col(col))


def _with_call(df: pl.DataFrame, calls: pl.DataFrame, rows: np.ndarray) -> pl.DataFrame:
    """`df` with the columns of its API call (row `rows` of `calls`, -1: none) appended: the
    left join on (process, correlation id), by the launch index's sorted search."""
    idx = pl.Series("_i", rows)
    if (rows < 0).any():
        idx = idx.set(pl.Series(rows < 0), None)
    return pl.concat([df, calls.drop(_ON, "_rec").select(pl.all().gather(idx))], how="horizontal")


_ON = ["process_id", "correlation_id"]


def cuda_events_table(
    ev: pl.DataFrame,
    sync: pl.DataFrame,
    api: pl.DataFrame,
    api_names: Strings,
    cupti_enum: bool,
) -> pa.Table:
    """Event records and stream waits of an nsys export (empty where it has neither).

    `ev`, `sync`: the raw CUDA_EVENT and SYNCHRONIZATION frames (EVENT_COLS, SYNC_COLS);
    `api`: the raw CUDA API frame with its name dictionary; `cupti_enum`: SYNCHRONIZATION has
    the `deprecatedSyncType` column (syncType follows CUPTI's enum)."""
    rec_ids, wait_ids = _name_ids(api_names, RECORD_API), _name_ids(api_names, WAIT_API)
    calls = _calls(api, rec_ids, wait_ids)
    # calls by (process, correlation id): the launch join's index (unique keys, sorted search)
    index = LaunchIndex(
        calls.select(pl.col("process_id").alias("globalPid"),
                     pl.col("correlation_id").alias("correlationId"))
    )  # fmt: skip
    rec = ev.select(
        pl.col("deviceId").alias("device_id"),
        pid_of("globalPid").alias("process_id"),
        _id("streamId").alias("stream_id"),
        _id("eventId").alias("event_id"),
        pl.col("eventSyncId").alias("event_sync_id"),
        pl.col("correlationId").alias("correlation_id"),
        pl.when(pl.col("timestamp") > 0).then(pl.col("timestamp")).alias("completed_ns"),
    )
    rows = launch_rows(index, rec["process_id"], rec["correlation_id"])
    rec = _with_call(rec, calls, rows)
    # record calls the report wrote no CUDA_EVENT row for: stream and event unknown
    recorded = np.zeros(calls.height, bool)
    recorded[rows[rows >= 0]] = True
    bare = calls.filter(pl.col("_rec") & ~pl.Series(recorded)).drop("_rec")
    waits = sync.select(
        pl.col("deviceId").alias("device_id"),
        pid_of("globalPid").alias("process_id"),
        _id("streamId").alias("stream_id"),
        _id("eventId").alias("event_id"),
        pl.col("eventSyncId").alias("event_sync_id"),
        pl.col("correlationId").alias("correlation_id"),
        "syncType",
        "start",
        "end",
    )
    waits = _with_call(
        waits, calls, launch_rows(index, waits["process_id"], waits["correlation_id"])
    )
    is_wait = pl.col("_nid").is_in(wait_ids).fill_null(False)
    if cupti_enum:
        is_wait = is_wait | (pl.col("_nid").is_null() & (pl.col("syncType") == _CUPTI_STREAM_WAIT))
    waits = (
        waits.filter(is_wait & pl.col("stream_id").is_not_null())
        .with_columns(
            pl.col("api_start_ns").fill_null(pl.col("start")),
            pl.col("api_end_ns").fill_null(pl.col("end")),
        )
        .drop("syncType", "start", "end")
    )
    parts = [
        rec.with_columns(pl.lit(0, pl.Int32).alias("_action")),
        bare.with_columns(pl.lit(0, pl.Int32).alias("_action")),
        waits.with_columns(pl.lit(1, pl.Int32).alias("_action")),
    ]
    df = pl.concat(parts, how="diagonal_relaxed")
    if df.height:  # by (api_start_ns, _action), nulls last, stable: numpy's lexsort
        start = df["api_start_ns"]
        keys = [df["_action"].to_numpy(), start.fill_null(0).to_numpy()]
        if start.null_count():
            keys.append(start.is_null().to_numpy())
        order = np.lexsort(keys)
        if (order[1:] < order[:-1]).any():
            df = df[order]
    df = df.with_columns(api_names.strings(df["_nid"]).alias("api")).drop("_nid")
    action = code_column(df["_action"] if df.height else pl.Series([], dtype=pl.Int32), ACTIONS)
    return finish("cuda_events", df.drop("_action"), {"action": action})


def counts(table: pa.Table) -> dict[str, int]:
    """Rows by action, and records whose stream the report does not give (for `info`, tests)."""
    act = np.asarray(table.column("action").cast(pa.string()).to_pylist(), dtype=object)
    stream_known = np.asarray(table.column("stream_id").is_valid())
    return {
        "records": int((act == "record").sum()),
        "records_without_stream": int(((act == "record") & ~stream_known).sum()),
        "waits": int((act == "wait").sum()),
    }
