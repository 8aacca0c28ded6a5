"""SVG snapshots of the TUI at fixed terminal sizes (80x24, 120x40, 200x50) on real traces: the
bundled samples, the two-stream H200 capture (event edges), two GPU-less captures (host-only),
and a generated 4-GPU report (per-GPU split).

Regenerate after an intended UI change:
    .venv/bin/pytest tests/tui/test_snapshots.py --snapshot-update

then look at the SVGs in tests/tui/__snapshots__/ before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot

from tracediff.engine.result import Comparison
from tracediff.tui.app import TracediffApp

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 40), id="120x40")]


async def _settle(pilot: Pilot) -> None:
    # the event index is built in a worker: wait for it so the timeline is drawn, not "indexing"
    await pilot.pause()
    for _ in range(2):  # the event index, then (started when it is in) the event edges
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


def test_event_edges(snap_compare, twostream) -> None:  # noqa: ANN001
    """The two-stream capture (cupy): each cycle's two event edges as letter pairs, base and head."""
    assert snap_compare(
        TracediffApp(twostream("cupy")), terminal_size=(120, 30), run_before=_settle
    )


def test_gpu_split(snap_compare, tmp_path: Path) -> None:  # noqa: ANN001
    """Four GPUs, rank 2 launching its all-reduces late (generated nsys report: the multi-GPU
    captures at hand cut their cycles differently from run to run): Σ view, enter on the top row
    lists it on each GPU and the sum."""
    from tests.support.gen_nsys import Straggler, write_report
    from tracediff.engine.compare import compare
    from tracediff.parse import load

    base = write_report(tmp_path / "b.sqlite", 4, 12, 24, seed=11)
    head = write_report(tmp_path / "h.sqlite", 4, 12, 24, [Straggler(2, 20_000)], seed=12)
    c = compare(load(base.path), load(head.path))

    async def before(pilot: Pilot) -> None:
        await _settle(pilot)
        await pilot.press("g", "home", "enter")
        await _settle_any(pilot)

    assert snap_compare(TracediffApp(c), terminal_size=(100, 30), run_before=before)


def test_host_only(snap_compare, hostonly: Comparison) -> None:  # noqa: ANN001
    """Two GPU-less `tracediff capture` runs at 80x24: the phases, the one-line notes, the replay
    strip of host range wall times, and the timeline saying why it has no GPU events."""
    assert snap_compare(TracediffApp(hostonly), terminal_size=(80, 24), run_before=_settle)


def test_wide_terminal(snap_compare, comparison: Comparison) -> None:  # noqa: ANN001
    """The bundled samples at 200x50: every column on screen, the names given the rest of the
    line (the table's width follows the terminal's)."""
    assert snap_compare(TracediffApp(comparison), terminal_size=(200, 50), run_before=_settle)


def test_run_set_demo(snap_compare, runsets: Comparison) -> None:  # noqa: ANN001
    """`make demo`'s pair, samples/runs/good vs samples/runs/bad (4 runs a side): the runs line
    under the verdict (each run's mean, both sides on one scale) and the runs column (✓4/4)."""
    assert snap_compare(TracediffApp(runsets), terminal_size=(80, 24), run_before=_settle)
