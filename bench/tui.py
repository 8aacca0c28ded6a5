"""TUI responsiveness at scale: first paint and key-press redraw with millions of GPU operations.

    .venv/bin/python bench/tui.py [--rows 5000000] [--repeat 10] [--size 120x40]

Builds large Comparisons from the bundled samples' real comparison by replicating its events
(times and counts are real, only repeated), in two layouts:
  long   the 12+12 cycles repeated K times as consecutive cycles (a long run: ~170 ops per cycle)
  dense  every cycle holds K copies of itself back to back (few cycles, ~200 k ops each)
and drives the app headless with Pilot (`app.run_test()`): time from starting the app to the
first painted frame, to the event index being ready (a worker), then per key press the time
from the key to the end of the repaint (`pilot.press` + `pilot.pause`, which runs the screen's
compositor update). Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracediff.engine.compare import compare  # noqa: E402
from tracediff.engine.result import Comparison  # noqa: E402
from tracediff.parse import load  # noqa: E402
from tracediff.tui.timelinemodel import TimelineModel  # noqa: E402

KEYS = [
    ("right", "next cycle"),
    ("left", "prev cycle"),
    ("down", "select next contributor"),
    ("plus", "zoom in"),
    ("right_square_bracket", "pan"),
    ("minus", "zoom out"),
    ("a", "align head to base"),
    ("s", "sort"),
    ("k", "kind filter"),
]


def long_run(c: Comparison, k: int) -> Comparison:
    n = int(c.cycles["cycle"].max()) + 1
    ev = pl.concat([c.events.with_columns(pl.col("cycle") + i * n) for i in range(k)])
    cy = pl.concat([c.cycles.with_columns(pl.col("cycle") + i * n) for i in range(k)])
    ev = ev.sort("side", "cycle", maintain_order=True)
    return replace(c, events_builder=lambda: ev, events_slice=None, cycles=cy)


def dense(c: Comparison, k: int) -> Comparison:
    period = int(c.events["rel_end_ns"].max()) + 1000
    ev = pl.concat(
        [
            c.events.with_columns(
                pl.col("rel_start_ns") + i * period,
                pl.col("rel_end_ns") + i * period,
                pl.col("slot") + i * 1_000_000,
            )
            for i in range(k)
        ]
    )
    cy = c.cycles.with_columns(pl.col("span_ns") + (k - 1) * period)
    ev = ev.sort("side", "cycle", maintain_order=True)
    return replace(c, events_builder=lambda: ev, events_slice=None, cycles=cy)


async def press_timed(pilot, key: str) -> tuple[float, float]:  # noqa: ANN001
    """Send one key the way Pilot does, wait until the app and screen processed everything it caused
    (two rounds: handlers post follow-up messages), then run the screen's repaint. Returns (wall s,
    CPU s). Unlike `pilot.press`, no idle-detection sleeps are included."""
    import unicodedata

    from textual import events
    from textual.app import _get_unicode_name_from_key

    app = pilot.app
    try:
        char = unicodedata.lookup(_get_unicode_name_from_key(key))
    except KeyError:
        char = key if len(key) == 1 else None
    t, c = time.perf_counter(), time.process_time()
    ev = events.Key(key, char)
    ev.set_sender(app)
    app._driver.send_message(ev)
    for _ in range(3):
        await pilot._wait_for_screen()
    app.screen._on_timer_update()  # the compositor update: widgets render, the frame is written
    return time.perf_counter() - t, time.process_time() - c


async def drive(
    c: Comparison, size: tuple[int, int], repeat: int
) -> dict[str, float | list[float]]:
    from tracediff.tui.app import MainScreen, TracediffApp

    out: dict = {}
    marks: dict[str, float] = {}
    mount = MainScreen.on_mount

    def on_mount(self: MainScreen) -> None:
        # runs right after the first frame of the main screen has been painted (queued before
        # the screen's own after-refresh work, which starts the index worker)
        self.call_after_refresh(lambda: marks.setdefault("paint", time.perf_counter()))
        mount(self)

    MainScreen.on_mount = on_mount  # type: ignore[method-assign]
    app = TracediffApp(c)
    t0 = time.perf_counter()
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        out["first paint (s)"] = marks["paint"] - t0
        out["timeline drawn (s)"] = time.perf_counter() - t0
        screen = app.screen
        assert isinstance(screen, MainScreen) and screen.model is not None
        for key, _ in KEYS:
            times = []
            for i in range(repeat):
                if key == "right" and screen.cycle >= screen.cycle_ids[-1]:
                    await pilot.press("left")
                times.append(await press_timed(pilot, key if key != "down" or i % 2 == 0 else "up"))
                await pilot.pause()  # settle before the next sample
            out[key] = times
        # drill-down: key to content (runs a worker that filters all events)
        times = []
        for _ in range(max(1, repeat // 3)):
            t, cpu = time.perf_counter(), time.process_time()
            await pilot.press("enter")
            await app.workers.wait_for_complete()
            await pilot.pause()
            times.append((time.perf_counter() - t, time.process_time() - cpu))
            await pilot.press("escape")
            await pilot.pause()
        out["enter"] = times
        t, cpu = time.perf_counter(), time.process_time()
        await pilot.press("m")
        await app.workers.wait_for_complete()
        await pilot.pause()
        out["m"] = [(time.perf_counter() - t, time.process_time() - cpu)]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rows", type=int, default=5_000_000, help="GPU operations in the big comparison"
    )
    ap.add_argument("--repeat", type=int, default=10, help="presses per key")
    ap.add_argument("--size", default="120x40", help="terminal WxH")
    args = ap.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    load0 = os.getloadavg()[0]
    base = compare(load(ROOT / "samples" / "g_good.arrow"), load(ROOT / "samples" / "g_bad.arrow"))
    k = math.ceil(args.rows / base.events.height)
    results = {}
    for name, build in (
        ("samples", lambda: base),
        ("long", lambda: long_run(base, k)),
        ("dense", lambda: dense(base, k)),
    ):
        t = time.perf_counter()
        c = build()
        built = time.perf_counter() - t
        ncyc = c.cycles.filter(pl.col("side") == "head")["cycle"].n_unique()
        print(
            f"{name}: {c.events.height:,} ops, {ncyc:,} head cycles, "
            f"{c.events.height // max(1, 2 * ncyc):,} ops per side-cycle (built in {built:.1f} s)",
            file=sys.stderr,
        )
        t = time.perf_counter()
        TimelineModel(c)
        index_s = time.perf_counter() - t
        res = asyncio.run(drive(c, (w, h), args.repeat))
        res["index build (s)"] = index_s
        results[name] = (c.events.height, res)

    names = list(results)
    load1 = os.getloadavg()[0]
    print(
        f"\nTUI at {w}x{h}, {os.cpu_count()} CPUs, "
        f"load average {load0:.1f} at start, {load1:.1f} at end."
        f"\nKeys: median wall ms over {args.repeat} presses, key -> repaint done (median CPU ms of"
        "\nthe process in brackets: what the redraw costs when the machine is not shared).\n"
    )
    print(f"{'':<30}" + "".join(f"{f'{n} ({results[n][0] / 1e6:.2f} M ops)':>24}" for n in names))
    for key, label in [
        ("first paint (s)", "first paint"),
        ("index build (s)", "event index (worker)"),
        ("timeline drawn (s)", "first paint + index + timeline"),
    ]:
        print(f"{label:<30}" + "".join(f"{1e3 * results[n][1][key]:>24.0f}" for n in names))
    for key, label in [*KEYS, ("enter", "drill-down (worker)"), ("m", "worst cycle (worker)")]:
        cells = []
        for n in names:
            v = results[n][1][key]
            wall = statistics.median(x[0] for x in v)
            cpu = statistics.median(x[1] for x in v)
            cells.append(f"{1e3 * wall:.1f} ({1e3 * cpu:.1f})")
        print(f"{key + ' ' + label:<30}" + "".join(f"{x:>24}" for x in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
