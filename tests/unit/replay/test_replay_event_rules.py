"""The rules of replay/events.py on small hand-made timelines (one cycle, one process).

Stream 1: X1, X2 launched, then the record of event 5, then X3. Stream 2 waits on event 5 and
then launches Y, which starts after X3 has ended: the timeline alone would tie Y to X3, the
trace ties it to X2 (the last op enqueued before the record).
"""

from __future__ import annotations

import polars as pl

from tracediff.replay.events import trace_edges

PID, TID = 10, 11


def _ops(rows: list[tuple[int, int, int, int]]) -> pl.DataFrame:
    """rows: (stream, launch, start, end) in chain order (stream, start)."""
    rows = sorted(rows, key=lambda r: (r[0], r[2]))
    return pl.DataFrame(
        {
            "_i": list(range(len(rows))),
            "_cyc": [0] * len(rows),
            "_o": [0] * len(rows),
            "process_id": [PID] * len(rows),
            "stream_id": [r[0] for r in rows],
            "launch_start_ns": [r[1] for r in rows],
            "start_ns": [r[2] for r in rows],
            "end_ns": [r[3] for r in rows],
        }
    )


def _events(rows: list[tuple[str, int | None, int | None, int, int | None]]) -> pl.DataFrame:
    """rows: (action, stream, event, api start, event_sync_id)."""
    return pl.DataFrame(
        {
            "action": [r[0] for r in rows],
            "process_id": [PID] * len(rows),
            "thread_id": [TID] * len(rows),
            "stream_id": [r[1] for r in rows],
            "event_id": [r[2] for r in rows],
            "api_start_ns": [r[3] for r in rows],
            "event_sync_id": [r[4] for r in rows],
        },
        schema_overrides={"stream_id": pl.Int64, "event_id": pl.Int64, "event_sync_id": pl.Int64},
    )


OPS = _ops(
    [
        (1, 0, 0, 100),  # X1: _i 0
        (1, 10, 100, 200),  # X2: _i 1
        (1, 20, 200, 300),  # X3: _i 2
        (2, 30, 305, 400),  # Y: _i 3
    ]
)


def _edges(ev: pl.DataFrame, ops: pl.DataFrame = OPS) -> list[tuple[int, int, int]]:
    e, _ = trace_edges(ops, ev)
    return [tuple(r) for r in e.select("_src", "_i", "_gap").iter_rows()]


def test_source_is_the_last_op_enqueued_before_the_record() -> None:
    ev = _events([("record", 1, 5, 15, None), ("wait", 2, 5, 25, None)])
    assert _edges(ev) == [(1, 3, 105)]  # X2 -> Y, not X3 (which ended last before Y)


def test_a_re_recorded_event_links_to_the_record_before_the_wait() -> None:
    ev = _events([("record", 1, 5, 15, None), ("wait", 2, 5, 25, None), ("record", 1, 5, 26, None)])
    assert _edges(ev) == [(1, 3, 105)]


def test_event_sync_id_wins_over_the_event_id() -> None:
    # by event id the wait would link to the first record (after X2); its eventSyncId names the
    # second (after X3), as nsys 2026.x links them
    ev = _events([("record", 1, 5, 15, 70), ("record", 1, 6, 22, 71), ("wait", 2, 5, 25, 71)])
    assert _edges(ev) == [(2, 3, 5)]


def test_an_unplaced_record_takes_the_stream_that_fits_the_timeline() -> None:
    # a third stream's op, enqueued before the record call, ends after Y starts: ruled out
    ops = _ops([(1, 0, 0, 100), (1, 10, 100, 200), (1, 20, 200, 300), (2, 30, 305, 400),
                (3, 5, 50, 350)])  # fmt: skip
    ev = _events([("record", None, None, 15, None), ("wait", 2, 5, 25, None)])
    e, stats = trace_edges(ops, ev)
    assert [tuple(r) for r in e.select("_src", "_i").iter_rows()] == [(1, 3)]  # X2 -> Y
    assert stats["event_edges_stream_from_timeline"] == 1


def test_a_contradicted_record_is_counted_not_used() -> None:
    # the record says stream 1 up to X3, but Y started before X3 ended: no edge, counted
    ops = _ops([(1, 0, 0, 100), (1, 10, 100, 200), (1, 20, 200, 300), (2, 30, 250, 400)])
    ev = _events([("record", 1, 5, 25, None), ("wait", 2, 5, 27, None)])
    e, stats = trace_edges(ops, ev)
    assert e.height == 0 and stats["event_edges_contradicted"] == 1
    assert stats["event_waits_unmatched"] == 1


def test_graph_launches_source_its_last_node_and_target_its_first() -> None:
    # one cudaGraphLaunch enqueues all its nodes at one time (launch 10 on stream 1, 30 on 2)
    ops = _ops([(1, 10, 0, 100), (1, 10, 100, 200), (2, 30, 205, 300), (2, 30, 300, 400)])
    ev = _events([("record", 1, 5, 15, None), ("wait", 2, 5, 25, None)])
    assert _edges(ev, ops) == [(1, 2, 5)]
