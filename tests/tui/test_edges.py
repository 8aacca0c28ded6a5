"""Cross-stream CUDA event edges on the timeline, on the real H200 two-stream captures.

Each cycle of `twostream.py` (tests/data/h200/twostream): the main stream runs A (a spin kernel),
records an event, the side stream waits on it before B; B records an event that the main stream
waits on before D. So, independently of how tracediff links the trace's records and waits: the
record of A's event sits where A ends on the main lane, its wait where B (the side stream's first
op to start after A ended) starts on the side lane, and likewise B's end and D's start. `good`
runs A shorter than the GEMM already on the side stream (B waits on that, not on A's event);
`slow-a` runs A ten times longer, and B starts right after A's event.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
import pytest
from textual.pilot import Pilot

from tests.support.tui import ready, run
from tracediff.engine.result import Comparison
from tracediff.tui import model as m
from tracediff.tui import timelinemodel as tl
from tracediff.tui.app import TracediffApp
from tracediff.tui.edges import WAITED_NS
from tracediff.tui.timeline import LABEL


def expected(c: Comparison, side: str, cycle: int) -> list[dict]:
    """The cycle's two edges from its ops alone: lanes by stream, times from the cycle start."""
    ev = c.events.filter((pl.col("side") == side) & (pl.col("cycle") == cycle))
    a = ev.filter(pl.col("name").cast(pl.String).str.contains("spin_kernel")).row(0, named=True)
    main = a["stream_id"]
    side_ops = ev.filter(pl.col("stream_id") != main).sort("rel_start_ns")
    b = side_ops.filter(pl.col("rel_start_ns") >= a["rel_end_ns"]).row(0, named=True)
    d = (
        ev.filter((pl.col("stream_id") == main) & (pl.col("rel_start_ns") >= b["rel_end_ns"]))
        .sort("rel_start_ns")
        .row(0, named=True)
    )
    return [
        {"rec": (main, a["rel_end_ns"]), "wait": (b["stream_id"], b["rel_start_ns"])},
        {"rec": (b["stream_id"], b["rel_end_ns"]), "wait": (main, d["rel_start_ns"])},
    ]


def lane_of(s, stream: int) -> int:  # noqa: ANN001
    return next(i for i, ln in enumerate(s.model.lanes) if ln.stream_id == stream)


def check_marks(s, c: Comparison) -> int:  # noqa: ANN001
    """Every mark drawn is an expected edge end in the column of its time, and every expected end
    inside the window is drawn, on the grid and in the text. Returns the marks seen."""
    lines = s.timeline.render().plain.splitlines()
    rows = s.timeline.last_rows
    assert rows is not None and rows.marks is not None
    width = rows.codes["base"].shape[1]
    dt = (rows.t1_ns - rows.t0_ns) / width
    seen = 0
    for si, side in enumerate(m.SIDES):
        want: dict[tuple[int, int], int] = {}
        for k, e in enumerate(expected(c, side, s.cycle)):
            for end, code in (("rec", 2 * k), ("wait", 2 * k + 1)):
                stream, t = e[end]
                col = int(np.floor((t - rows.t0_ns) / dt))
                if 0 <= col < width:
                    want[(lane_of(s, stream), col)] = code
        grid = rows.marks[side]
        got = (
            {}
            if grid is None
            else {(int(i), int(j)): int(grid[i, j]) for i, j in np.argwhere(grid >= 0)}
        )
        assert got == want, side
        for (lane, col), code in got.items():
            letter = chr(ord("A") + code // 2)
            assert lines[1 + 2 * lane + si][LABEL + col] == (letter.lower() if code % 2 else letter)
        seen += len(got)
    return seen


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_edge_marks_land_where_records_and_waits_happened(
    twostream: Callable[[str], Comparison], lib: str
) -> None:
    c = twostream(lib)

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert len(s.model.lanes) == 2 and s.timeline.edges
        assert "event waits base 2 head 2" in str(s.timeline.border_title)
        assert check_marks(s, c) == 8  # whole cycle: both edges, both ends, both sides
        # A's event: in slow-a B starts as soon as A's event completes; in good the GEMM before it
        # on its own stream held it longer
        for side, waited in (("base", False), ("head", True)):
            e = expected(c, side, 0)[0]
            assert (e["wait"][1] - e["rec"][1] <= WAITED_NS) == waited
            assert bool(s.timeline.last_rows.waited[side][0]) == waited
        await pilot.press("right", "right", "right")
        assert s.cycle == 3 and check_marks(s, c) == 8
        # zoomed in, then panned until B's end (head) is in the window: only the ends inside it
        await pilot.press("plus", "plus", "plus")
        t0, t1 = s.timeline.span()
        assert t1 - t0 < s.model.full_span(3) / 4
        b_end = expected(c, "head", 3)[1]["rec"][1]
        for _ in range(40):
            t0, t1 = s.timeline.span()
            if t0 <= b_end < t1:
                break
            await pilot.press("right_square_bracket" if b_end >= t1 else "left_square_bracket")
        assert t0 <= b_end < t1
        assert 1 <= check_marks(s, c) < 8
        await pilot.press("a")  # head drawn through base's times: its marks move with its bars
        rows = s.timeline.last_rows
        assert rows.marks is not None
        await pilot.press("e")
        assert s.timeline.last_rows.marks is None
        assert "event edges hidden" in str(s.timeline.border_title)
        text = s.timeline.render().plain.splitlines()
        assert not any(ch.isalpha() for line in text[1:-1] for ch in line[LABEL:])

    run(body, TracediffApp(c), size=(120, 30))


def test_marks_follow_the_warp_when_head_is_aligned(
    twostream: Callable[[str], Comparison],
) -> None:
    c = twostream("cupy")
    tm = tl.TimelineModel(c)
    width, cycle = 200, 2
    span = tm.full_span(cycle)
    rows = tm.render(cycle, 0, span, width, align=True, edges=True)
    warp = tm.warp(cycle)[0]
    dt = span / width
    for k, e in enumerate(expected(c, "head", cycle)):
        for end, code in (("rec", 2 * k), ("wait", 2 * k + 1)):
            stream, t = e[end]
            col = int(np.floor(np.interp(t, *warp) / dt))
            lane = next(i for i, ln in enumerate(tm.lanes) if ln.stream_id == stream)
            assert rows.marks is not None and rows.marks["head"][lane, col] == code


def test_no_marks_without_event_tables(
    twostream: Callable[[str], Comparison], comparison: Comparison
) -> None:
    # the CUDA-graph samples have no stream waits: nothing to draw, the key stays out of the footer
    tm = tl.TimelineModel(comparison)
    assert tm.edges.total == 0 and tm.render(0, 0, tm.full_span(0), 80, edges=True).marks is None
    # a comparison whose base run came without its event table: head's edges only, base says so
    c = twostream("cupy")
    from dataclasses import replace

    inputs = replace(c.replay_inputs, base_events=None)

    tm = tl.TimelineModel(replace(c, replay_inputs=inputs))
    assert tm.edges.count("base", 0) is None and tm.edges.count("head", 0) == 2
    rows = tm.render(0, 0, tm.full_span(0), 80, edges=True)
    assert rows.marks is not None and rows.marks["base"] is None
    assert (rows.marks["head"] >= 0).sum() == 4
