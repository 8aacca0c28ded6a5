"""The TUI tests' driving helpers: run an app under Pilot, wait for its workers, read its screen."""

from __future__ import annotations

import html
import re

from textual.pilot import Pilot

from tracediff.tui.app import MainScreen, TracediffApp


async def ready(pilot: Pilot) -> MainScreen:
    await pilot.pause()
    for _ in range(2):  # the event index, then (started when it is in) the event edges
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, MainScreen)
    return screen


def run(coro_fn, app: TracediffApp, size: tuple[int, int] = (120, 40)) -> None:  # noqa: ANN001
    import asyncio

    async def go() -> None:
        async with app.run_test(size=size) as pilot:
            await coro_fn(pilot)

    asyncio.run(go())


def screen_lines(app: TracediffApp) -> list[str]:
    """The screen's text, one string per terminal row (from the SVG export's text spans)."""
    svg = app.export_screenshot()
    rows: dict[float, list[str]] = {}
    for m in re.finditer(r'<text[^>]*\by="([\d.]+)"[^>]*>(.*?)</text>', svg, re.S):
        rows.setdefault(float(m.group(1)), []).append(m.group(2))
    return [
        html.unescape(re.sub(r"<[^>]+>", "", "".join(p))).replace("\xa0", " ")
        for _, p in sorted(rows.items())
    ]
