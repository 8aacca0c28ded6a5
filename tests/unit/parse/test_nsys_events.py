"""The `cuda_events` table read from real nsys exports: event records and stream waits.

tests/data/h200/twostream/: capture/workload/twostream.py on the lent H200 under nsys 2024.2.3,
20 cycles each: two streams, A -> (event) -> B on the side stream, B -> (event) -> D on main.
The torch loop records its events with cudaEventRecordWithFlags (no CUDA_EVENT row in 2024.2);
the CuPy loop with cudaEventRecord (a CUDA_EVENT row with the recording stream).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tracediff.parse import load
from tracediff.parse.nsys.events import counts
from tracediff.runs import schema
from tracediff.runs.runfile import Run, read_run, write_run

DATA = Path(__file__).resolve().parent.parent.parent / "data"
TWO = DATA / "h200" / "twostream"


def _events(path: Path) -> pl.DataFrame:
    df = pl.from_arrow(load(path).table("cuda_events"))
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("action", "api").cast(pl.String))


def test_cupy_records_and_waits_are_placed() -> None:
    t = load(TWO / "cupy_good.sqlite").table("cuda_events")
    assert t.schema.equals(schema.CUDA_EVENTS)
    # per cycle: ev_a and ev_b recorded (and one CuPy-internal record), two waits
    assert counts(t) == {"records": 60, "records_without_stream": 0, "waits": 40}
    df = _events(TWO / "cupy_good.sqlite")
    waits = df.filter(pl.col("action") == "wait")
    assert set(waits["api"]) == {"cudaStreamWaitEvent"}
    assert waits["thread_id"].null_count() == 0 and waits["api_start_ns"].null_count() == 0
    # each wait names an event recorded on the other stream
    rec = df.filter(pl.col("action") == "record").select(
        "event_id", pl.col("stream_id").alias("rec_stream")
    )
    pairs = waits.join(rec.unique(), on="event_id").select("stream_id", "rec_stream").unique()
    assert pairs.height == 2 and (pairs["stream_id"] != pairs["rec_stream"]).all()


def test_torch_records_have_no_stream_in_nsys_2024_2() -> None:
    df = _events(TWO / "torch_good.sqlite")
    rec = df.filter(pl.col("action") == "record")
    assert rec.height == 40 and set(rec["api"]) == {"cudaEventRecordWithFlags"}
    assert rec["stream_id"].null_count() == 40 and rec["event_id"].null_count() == 40
    waits = df.filter(pl.col("action") == "wait")
    assert waits.height == 40 and sorted(waits["stream_id"].unique()) == [7, 13]
    # the waited event is the same object every cycle (one id per stream)
    assert waits.group_by("stream_id").agg(pl.col("event_id").n_unique())["event_id"].max() == 1


def test_sync_type_is_not_what_labels_a_wait() -> None:
    """nsys 2024.2 writes syncType 3 ("Stream sync") on cudaStreamWaitEvent and 2 ("Stream wait
    sync") on cudaEventQuery: a wait is known by its API call."""
    con = sqlite3.connect(f"file:{TWO / 'torch_good.sqlite'}?mode=ro", uri=True)
    types = con.execute(
        "SELECT DISTINCT y.syncType FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION y "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = y.correlationId "
        "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaStreamWaitEvent%'"
    ).fetchall()
    con.close()
    assert types == [(3,)]
    # g_good's 81 cudaEventQuery syncs (syncType 2) are no waits; its records sit on stream 7
    g = _events(DATA / "h200" / "g_good.sqlite")
    assert g.filter(pl.col("action") == "wait").height == 0
    placed = g.filter(pl.col("stream_id").is_not_null())
    assert placed.height == 72 and set(placed["stream_id"]) == {7}


def test_newer_schema_columns_are_detected_by_presence(tmp_path: Path) -> None:
    """Without the API call, syncType 2 counts as a wait only where the schema has
    deprecatedSyncType (nsys 2026.x, CUPTI's enum); eventSyncId and timestamp are read."""
    src = tmp_path / "r.sqlite"
    shutil.copy(TWO / "cupy_good.sqlite", src)
    src.chmod(0o644)
    con = sqlite3.connect(src)
    con.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN "
        "(SELECT id FROM StringIds WHERE value LIKE 'cudaStreamWaitEvent%')"
    )
    con.commit()
    assert counts(load(src).table("cuda_events"))["waits"] == 0  # 2024.2: syncType untrusted
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ADD COLUMN deprecatedSyncType")
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ADD COLUMN eventSyncId INTEGER")
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT ADD COLUMN eventSyncId INTEGER")
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT ADD COLUMN timestamp INTEGER")
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET deprecatedSyncType = syncType, "
        "syncType = 2, eventSyncId = eventId + 1000 WHERE syncType = 3"
    )
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_CUDA_EVENT SET timestamp = 5, eventSyncId = 7")
    con.commit()
    con.close()
    df = _events(src)
    waits = df.filter(pl.col("action") == "wait")
    assert waits.height == 40 and waits["api"].null_count() == 40
    assert waits["api_start_ns"].null_count() == 0  # the sync row's own times
    assert (waits["event_sync_id"] == waits["event_id"] + 1000).all()
    rec = df.filter(pl.col("action") == "record")
    assert (rec["completed_ns"] == 5).all() and (rec["event_sync_id"] == 7).all()


def test_run_file_round_trip_and_older_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = load(TWO / "cupy_good.sqlite")
    write_run(run, tmp_path / "new.arrow")
    assert read_run(tmp_path / "new.arrow").table("cuda_events").equals(run.table("cuda_events"))
    # a run file written before the table existed (a tracediff without it) reads it as empty
    old = Run(
        tables={k: v for k, v in run.tables.items() if k != "cuda_events"}, metadata=run.metadata
    )
    with monkeypatch.context() as m:
        m.setattr(schema, "TABLES", {k: v for k, v in schema.TABLES.items() if k != "cuda_events"})
        write_run(old, tmp_path / "old.arrow")
    # and without checksums, which came later too (a checked file lacking a table is damage)
    from tests.support.make_corpus import strip_checksums

    (tmp_path / "old.arrow").write_bytes(strip_checksums((tmp_path / "old.arrow").read_bytes()))
    t = read_run(tmp_path / "old.arrow").table("cuda_events")
    assert t.num_rows == 0 and t.schema.equals(schema.CUDA_EVENTS)


@pytest.mark.parametrize(
    "rel",
    ["nsys/nsys-ai/mfu_2gpu_before.sqlite", "nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"],
)
def test_other_schemas(rel: str) -> None:
    c = counts(load(DATA / rel).table("cuda_events"))
    if "mfu" in rel:  # nsys 2026.2: waits (CUPTI enum), an empty CUDA_EVENT table
        assert c == {"records": 332, "records_without_stream": 332, "waits": 200}
    else:  # nsys 2022.2, schema 2.9: neither
        assert c == {"records": 0, "records_without_stream": 0, "waits": 0}
