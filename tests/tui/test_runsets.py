"""The TUI on a run-set comparison (issue 22): the runs per side and each run's mean cycle time
beside the verdict, and a runs column saying which contributors moved the same way in every run.
Pilot tests at 80x24 and 200x50 read what is on screen (the exported screen's text)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from textual.pilot import Pilot

from tests.support.tui import ready, run, screen_lines
from tracediff.engine.result import Comparison
from tracediff.tui.app import TracediffApp
from tracediff.tui.model import SPARK

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 50), id="200x50")]


def _expected_spark(means: tuple[float, ...], lo: float, hi: float) -> str:
    v = (np.asarray(means) - lo) / (hi - lo) * (len(SPARK) - 1)
    return "".join(SPARK[int(i)] for i in np.clip(v.round(), 0, len(SPARK) - 1))


@pytest.mark.parametrize("size", SIZES)
def test_verdict_shows_each_runs_mean_on_one_scale(
    runsets: Comparison, size: tuple[int, int]
) -> None:
    b, h = runsets.base, runsets.head
    assert (b.runs, h.runs) == (4, 4) and len(b.run_means_ms) == 4 == len(h.run_means_ms)
    every = [*b.run_means_ms, *h.run_means_ms]
    lo, hi = min(every), max(every)

    async def body(pilot: Pilot) -> None:
        await ready(pilot)
        lines = screen_lines(pilot.app)
        runs = [ln for ln in lines if ln.strip().startswith("runs base 4 ")]
        assert len(runs) == 1, "\n".join(lines[:6])
        line = runs[0]
        # each side's strip: one character per run, both on the min..max scale of all 8 runs
        assert f"base 4 {_expected_spark(b.run_means_ms, lo, hi)} " in line
        assert f"head 4 {_expected_spark(h.run_means_ms, lo, hi)} " in line
        assert f"{min(b.run_means_ms):.3f}–{max(b.run_means_ms):.3f}" in line
        # the runs line sits under the verdict's change and base → head lines (the text
        # report's order), above the table
        at = lines.index(line)
        assert lines[at - 1].strip().startswith("base ")
        assert lines[at - 2].strip().startswith("change ")

    run(body, TracediffApp(runsets), size)


@pytest.mark.parametrize("size", SIZES)
def test_runs_column_marks_what_moved_in_every_run(
    runsets: Comparison, size: tuple[int, int]
) -> None:
    att = runsets.attribution
    copy = att.filter(pl.col("name") == "Memcpy DtoD").row(0, named=True)
    assert copy["consistent"] and copy["significant"]
    swings = att.filter(pl.col("consistent").not_())
    assert swings.height  # some contributors did not move the same way in every run

    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        lay = s.table.lay
        assert lay is not None
        heads = [c[0] for c in lay.columns]
        # on screen at 80 columns too: the runs column comes right after the name
        assert heads.index("runs") == heads.index("name") + 1 < lay.on_screen
        header = next(ln for ln in screen_lines(pilot.app) if "change ms name" in ln)
        assert " runs " in header
        # WHEN the user searches for the copy THEN its row says: in 4 of 4 runs, ✓
        await pilot.press("slash", *"dtod", "enter")
        assert s.table.ids and s.table.ids[0] == copy["contributor_id"]
        row = next(ln for ln in screen_lines(pilot.app) if "Memcpy DtoD" in ln and "*" in ln)
        assert f"✓{copy['head_runs']}/4 " in row
        # WHEN the search is cleared and a row that swung both ways is found THEN no ✓
        await pilot.press("escape")
        first = swings.sort(pl.col("delta_ms_per_cycle").abs(), descending=True).row(0, named=True)
        assert s.table.ids[0] == first["contributor_id"]
        cell = str(s.table.get_row_at(0)[0])
        assert f" {first['head_runs']}/4 " in cell and "✓" not in cell

    run(body, TracediffApp(runsets), size)


def test_one_run_a_side_has_no_runs_line_or_column(comparison: Comparison) -> None:
    async def body(pilot: Pilot) -> None:
        s = await ready(pilot)
        assert s.table.lay is not None
        assert "runs" not in [c[0] for c in s.table.lay.columns]
        assert not [ln for ln in screen_lines(pilot.app) if ln.strip().startswith("runs ")]

    run(body, TracediffApp(comparison), (80, 24))
