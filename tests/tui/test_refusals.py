"""What the TUI says when it cannot act (issue 33): a what-if the replay refuses is titled as a
refusal with its reason, not "whatif failed" with an exception's class name; the stack view of
runs without launch stacks says where stacks come from, nsys included."""

from __future__ import annotations

import asyncio

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
