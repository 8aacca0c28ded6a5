"""What the TUI says when it cannot act (issue 33): a what-if the replay refuses is titled as a
refusal with its reason, not "whatif failed" with an exception's class name; the stack view of
runs without launch stacks says where stacks come from, nsys included."""

from __future__ import annotations

import asyncio
import re

from textual.pilot import Pilot

from tracediff.engine.result import Comparison
from tracediff.tui.app import MainScreen, TracediffApp
from tracediff.tui.screens import ErrorModal
from tracediff.tui.stackview import why_none


def test_a_refused_whatif_is_a_refusal(twostream) -> None:  # noqa: ANN001
    c = twostream("torch")
    overlap = c.attribution.filter(c.attribution["kind"] == "overlap")["contributor_id"][0]

    async def body(pilot: Pilot) -> None:
        await pilot.pause()
        for _ in range(2):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        s = pilot.app.screen
        assert isinstance(s, MainScreen)
        s.table.move_cursor(row=s.table.ids.index(overlap))
        assert s.table.current() == overlap
        await pilot.press("x")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        modal = pilot.app.screen
        assert isinstance(modal, ErrorModal)
        assert modal.title_text == "what-if cannot replay that"
        text = modal.body.plain
        assert "overlap" in text and "UsageError" not in text and "failed" not in text

    async def go() -> None:
        async with TracediffApp(c).run_test(size=(120, 40)) as pilot:
            await body(pilot)

    asyncio.run(go())


def test_no_stacks_names_nsys_too(comparison: Comparison) -> None:
    said = why_none(comparison, "kernel")
    assert "nsys" in said and "function trace" in said and "not yet" not in said


def test_help_and_drill_down_fit_80x24(comparison: Comparison) -> None:
    """At 80x24 the help's paragraphs wrap at the dialog's width (no line breaks of their own)
    and scroll with the arrow keys; the drill-down histogram's rows (bins, each side's bar and
    count) fit the dialog's text, so no count wraps onto a line of its own."""
    from textual.containers import VerticalScroll
    from textual.widgets import Static

    from tracediff.tui import model as m
    from tracediff.tui.drilldown import drill_text
    from tracediff.tui.screens import HelpScreen

    async def body(pilot: Pilot) -> None:
        await pilot.pause()
        for _ in range(2):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        h = pilot.app.screen
        assert isinstance(h, HelpScreen)
        assert "one lane per GPU (per stream where a GPU has several)" in h.body.plain
        scroll = h.query_one(VerticalScroll)
        assert scroll.max_scroll_y > 0  # more than a screen at 24 lines
        await pilot.press("down", "down")
        assert scroll.scroll_y == 2
        await pilot.press("escape")
        await pilot.pause()
        s = pilot.app.screen
        assert isinstance(s, MainScreen)
        att = comparison.attribution
        cid = att.filter(att["kind"] == "memcpy")["contributor_id"][0]  # ops with instances
        s.table.move_cursor(row=s.table.ids.index(cid))
        await pilot.press("enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        width = pilot.app.screen.query_one(Static).content_region.width
        text = drill_text(m.drill(comparison, cid)).plain.splitlines()
        rows = [ln for ln in text if re.match(r"\s*[\d.]+–[\d.]+ ", ln)]  # bins, bars, counts
        assert len(rows) == 8 and max(len(ln) for ln in rows) <= width, (width, rows)

    async def go() -> None:
        async with TracediffApp(comparison).run_test(size=(80, 24)) as pilot:
            await body(pilot)

    asyncio.run(go())
