"""SVG snapshots of the TUI at fixed terminal sizes (80x24, 120x40) on the bundled samples.

Regenerate after an intended UI change:
    .venv/bin/pytest tests/tui/test_snapshots.py --snapshot-update

then look at the SVGs in tests/tui/__snapshots__/ before committing them.
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot

from tracediff.engine.result import Comparison
from tracediff.tui.app import TracediffApp

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


async def _settle(pilot: Pilot) -> None:
    # the event index is built in a worker: wait for it so the timeline is drawn, not "indexing"
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES)
def test_main_screen(snap_compare, comparison: Comparison, size: tuple[int, int]) -> None:  # noqa: ANN001
    assert snap_compare(TracediffApp(comparison), terminal_size=size, run_before=_settle)


@pytest.mark.parametrize("size", SIZES)
def test_cycle_selected_contributor_zoomed(
    snap_compare, comparison: Comparison, size: tuple[int, int]
) -> None:  # noqa: ANN001
    async def before(pilot: Pilot) -> None:
        await _settle(pilot)
        await pilot.press("slash", *"dtod", "enter", "right", "right", "a", "plus")

    assert snap_compare(TracediffApp(comparison), terminal_size=size, run_before=before)


@pytest.mark.parametrize("size", SIZES)
def test_drill_down(snap_compare, comparison: Comparison, size: tuple[int, int]) -> None:  # noqa: ANN001
    async def before(pilot: Pilot) -> None:
        await _settle(pilot)
        await pilot.press("slash", *"dtod", "enter", "enter")
        await _settle_any(pilot)

    assert snap_compare(TracediffApp(comparison), terminal_size=size, run_before=before)


async def _settle_any(pilot: Pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
