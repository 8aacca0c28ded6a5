"""The timeline fetches events only for the GPUs and cycles on screen (issue 21), driven by key
presses on a real app: a generated run set of 4 GPUs (2 runs a side, tests/unit/engine/test_event_slices
gen_runsets), at a terminal height where the timeline has room for one GPU's lanes.

What is checked: the lanes drawn are the shown GPU's and their cells are exactly its events of
the shown cycle (compared with the whole events table, built only at the end); the fetch log
holds only the GPUs shown and the blocks of cycles shown; the GPUs never shown were never
fetched, and the whole events table was never built (`Comparison.events` is a cached property:
on the previous code the timeline's index built it, every run re-reduced).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from textual.pilot import Pilot

from tests.support.eventslices import gen_runsets, open_sets
from tests.support.tui import ready, run
from tracediff.engine.result import Comparison
from tracediff.tui import model as m
from tracediff.tui.app import TracediffApp
from tracediff.tui.drilldown import DrillScreen
from tracediff.tui.eventcache import BLOCK
from tracediff.tui.main import MainScreen
from tracediff.tui.timeline import LABEL

SIZE = (110, 24)  # the timeline's room: one GPU's two lanes (fit.py)


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return gen_runsets(tmp_path_factory.mktemp("lazy-sets"), gpus=4, runs=2, cycles=12)


def built(c: Comparison) -> bool:
    """Whether the whole events table was built (the cached property holds it)."""
    return "events" in c.__dict__


def painted_is(s: MainScreen, c: Comparison, device: int, cycle: int) -> None:
    """The timeline's drawn cells (its last render) are this GPU's events of this cycle."""
    rows = s.timeline.last_rows
    assert rows is not None and [ln.device_id for ln in rows.lanes] == [device]
    width = s.timeline.content_size.width - LABEL
    dt = (rows.t1_ns - rows.t0_ns) / width
    for side in m.SIDES:
        ev = c.events.filter(
            (pl.col("side") == side) & (pl.col("cycle") == cycle) & (pl.col("device_id") == device)
        )
        assert ev.height
        busy = np.zeros(width, bool)
        for a, b in ev.select("rel_start_ns", "rel_end_ns").iter_rows():
            c0 = int(a // dt)
            busy[c0 : max(int(np.ceil(b / dt)), c0 + 1)] = True
        assert ((rows.codes[side][0] >= m.KERNEL) == busy).all(), side


def test_the_timeline_fetches_only_the_gpu_and_cycles_it_shows(sets: tuple[Path, Path]) -> None:
    c = open_sets(*sets)
    gpus = sorted(set(c.cycles["device_id"].to_list()))
    assert gpus == [0, 1, 2, 3]

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        log = s.events.log
        assert s.lane_rows == 1 and s.model is not None and s.model.shown == [0]
        assert {(f.side, f.device_id, f.lo, f.hi) for f in log} == {
            ("base", 0, 0, BLOCK),
            ("head", 0, 0, BLOCK),
        }
        assert "GPU 0" in s.timeline.render().plain and "GPU 1" not in s.timeline.render().plain
        # g: Σ, GPU 0, GPU 1, GPU 2: the timeline follows the filter (GPU 1 fetched or not:
        # its worker reads what is shown when it runs)
        await pilot.press("g", "g", "g", "g")
        s = await ready(pilot)
        assert s.gpu == 2 and s.model.shown == [2]
        assert {0, 2} <= s.events.devices_fetched() <= {0, 1, 2}
        # one block ahead: cycle BLOCK is fetched, for GPU 2 only
        n = len(log)
        await pilot.press(*["right"] * BLOCK)
        s = await ready(pilot)
        assert s.cycle == BLOCK and f"cycle {BLOCK} " in str(s.timeline.border_title)
        assert {(f.side, f.device_id, f.lo) for f in log[n:]} == {
            ("base", 2, BLOCK),
            ("head", 2, BLOCK),
        }
        assert not built(c) and 3 not in s.events.devices_fetched()  # never shown
        painted_is(s, c, 2, BLOCK)  # (builds the whole table to compare with)
        await pilot.press(*["left"] * BLOCK)
        s = await ready(pilot)
        assert s.cycle == 0 and len(log) == n + 2  # fetched before: kept
        painted_is(s, c, 2, 0)

    run(body, TracediffApp(c), size=SIZE)


def test_a_drill_down_fetches_its_contributors_gpu_only(sets: tuple[Path, Path]) -> None:
    c = open_sets(*sets)

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        # Σ, GPU 0, GPU 1: its rows, the timeline on it; then kernels only
        await pilot.press("g", "g", "g", "k")
        s = await ready(pilot)
        assert s.gpu == 1 and s.kind == "kernel"
        cid = s.table.current()
        await pilot.press("enter")
        await ready_drill(pilot)
        d = pilot.app.screen
        assert isinstance(d, DrillScreen) and d.drill is not None
        # every cycle of GPU 1 on both sides, nothing of GPUs 2 and 3
        assert s.events.devices_fetched() == {0, 1} and not built(c)
        ends = {f.side: f.hi for f in s.events.log if f.device_id == 1}
        top = c.cycles.group_by("side").agg(pl.col("cycle").max() + 1)
        assert ends == dict(top.iter_rows())
        want = c.events.filter(pl.col("contributor_id") == cid)
        for side in m.SIDES:
            got = d.drill.durations[side]
            exp = want.filter(pl.col("side") == side)["duration_ns"].to_numpy() / 1e3
            assert got.size and np.array_equal(np.sort(got), np.sort(exp)), side

    run(body, TracediffApp(c), size=SIZE)


async def ready_drill(pilot: Pilot) -> None:
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
