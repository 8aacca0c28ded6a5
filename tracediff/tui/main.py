"""The main screen's keys: sort, filters, search, cycle and timeline window, drill-down, what-if.

Stage: presentation. Input: an in-memory `Comparison` (shown by mainview.py's `MainView`, whose
state these keys change). Heavy work (fetching events, event edges, drill-down, worst cycle,
what-if) goes to the app's thread workers; app.py hands the results back (`jump`, `show_whatif`).
A key that cannot act for these runs says why (`reasons.py`) instead of doing nothing; one that
never can is left out of the footer (`check_action`) and says why when pressed (`action_why`).
"""

from __future__ import annotations

from typing import Any

import polars as pl
from textual import on
from textual.widgets import DataTable, Input

from tracediff.tui import model as m
from tracediff.tui import reasons as why_not
from tracediff.tui import timelinemodel as tm
from tracediff.tui.attribution import AttributionTable
from tracediff.tui.drilldown import DrillScreen
from tracediff.tui.gpusplit import GpuSplitScreen
from tracediff.tui.keys import KEYS
from tracediff.tui.mainview import MainView
from tracediff.tui.screens import NotesScreen, StackScreen

PLAY_INTERVAL_S = 0.5


class MainScreen(MainView):
    """Verdict, attribution table, replay strip and timeline of one comparison, and their keys."""

    BINDINGS = KEYS

    def on_mount(self) -> None:
        self.fit_height()
        self.query_one("#search").display = False
        self.query_one("#attribution").border_title = "attribution"
        self.query_one("#replay").border_title = (
            "replay · host range wall time per cycle" if self.host_only else "replay"
        )
        if self.host_only:
            self.timeline.no_events_reason = why_not.HOST_ONLY
        self.timer = self.set_interval(PLAY_INTERVAL_S, self._tick, pause=True)
        self.refresh_table()
        self.show_cycle()
        # fetch the first cycle's events once the first frame is out (the worker competes for
        # the CPU), of the GPUs the timeline shows only
        gpus = self.timeline_gpus(lambda d: 1)
        cycle = self.cycle
        self.call_after_refresh(
            self.app.run_worker,
            lambda: tm.TimelineModel(
                self.c, edges=False, cache=self.events, shown=gpus, cycle=cycle
            ),
            name="index",
            thread=True,
            exit_on_error=False,
        )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # enter on a Σ row splits it by GPU (AttributionTable's first enter binding), elsewhere it
        # falls through to the drill-down. p and e stay out of the footer where they cannot act
        # (their `why` bindings then say why); every other key says why itself (`say`).
        if action == "split_summed":
            return self.gpu == m.SUMMED
        if action == "per_gpu":
            return bool(self.summed.height)
        if action == "toggle_edges":  # asked on every footer refresh: no sentence built here
            return self.model is not None and self.edges_ready and self.model.edges.total > 0
        return True

    def action_why(self, action: str) -> None:
        """A key whose action cannot act for these runs (left out of the footer): it says why."""
        getattr(self, f"action_{action}")()

    # --- actions -----------------------------------------------------------------------------
    def action_step(self, delta: int) -> None:
        i = self.cycle_ids.index(self.cycle) + delta
        if not 0 <= i < len(self.cycle_ids):
            end = "first" if i < 0 else "last"
            self.say(f"cycle {self.cycle} is the {end} of {len(self.cycle_ids)}")
            return
        self.cycle = self.cycle_ids[i]
        self.show_cycle()

    def action_play(self) -> None:
        if len(self.cycle_ids) < 2 and not self.playing:
            self.say("play: these runs have one cycle, nothing to step through")
            return
        self.playing = not self.playing
        if self.playing:
            if self.cycle == self.cycle_ids[-1]:
                self.cycle = self.cycle_ids[0]
            self.timer.resume()
        else:
            self.timer.pause()
        self.show_cycle()

    def _tick(self) -> None:
        if self.cycle == self.cycle_ids[-1]:
            self.action_play()  # stop at the last cycle
        else:
            self.action_step(1)

    def action_sort(self) -> None:
        names = list(m.SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self.refresh_table()

    def action_filter_kind(self) -> None:
        if not self.kinds:
            self.say("kind filter: the table has no rows")
            return
        opts: list[str | None] = [None, *self.kinds]
        self.kind = opts[(opts.index(self.kind) + 1) % len(opts)]
        self.refresh_table()

    def action_filter_gpu(self) -> None:
        if not self.gpus:
            why = why_not.HOST_ONLY if self.host_only else "no row of the table is on a GPU"
            self.say(f"GPU filter: {why}")
            return
        opts: list[int | str | None] = [
            None,
            *([m.SUMMED] if self.summed.height else []),
            *self.gpus,
        ]
        self.gpu = opts[(opts.index(self.gpu) + 1) % len(opts)]
        self.refresh_table()

    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.display = True
        box.focus()

    def action_clear_search(self) -> None:
        box = self.query_one("#search", Input)
        box.value = ""
        box.display = False
        self.table.focus()

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value.strip()
        self.refresh_table()

    @on(Input.Submitted, "#search")
    def _search_done(self) -> None:
        # the table's title keeps showing the query; `/` reopens it, escape clears it
        self.query_one("#search").display = False
        self.table.focus()

    def action_zoom(self, factor: float) -> None:
        key = "zoom in" if factor < 1 else "zoom out"
        if self.no_timeline(key):
            return
        before = self.timeline.span()
        self.timeline.zoom(factor)
        if self.timeline.span() == before:
            self.say(
                f"{key}: the window is 1 µs, the finest the timeline draws"
                if factor < 1
                else f"{key}: the whole cycle is shown"
            )

    def action_pan(self, frac: float) -> None:
        key = "pan left" if frac < 0 else "pan right"
        if self.no_timeline(key):
            return
        before = self.timeline.span()
        self.timeline.pan(frac)
        if self.timeline.span() == before:
            where = "start" if frac < 0 else "end"
            zoom = "" if self.timeline.window else " (the whole cycle is shown: + zooms in)"
            self.say(f"{key}: the window is at the cycle's {where}{zoom}")

    def action_fit(self) -> None:
        if self.no_timeline("fit"):
            return
        if self.timeline.window is None:
            self.say("fit: the whole cycle is shown already")
            return
        self.timeline.show(window=None, t0=0)

    def action_align(self) -> None:
        if self.no_timeline("align"):
            return
        self.timeline.show(align=not self.timeline.align)

    def action_toggle_edges(self) -> None:
        why = self.edges_missing()
        if why is not None:
            self.say(f"event edges: {why}")
            return
        self.timeline.show(edges=not self.timeline.edges)

    def action_per_gpu(self) -> None:
        if not self.summed.height:
            self.say(f"per-GPU split: {why_not.per_gpu_missing(self.host_only, self.gpus)}")
            return
        cid = self.no_row("per-GPU split")
        if cid is None:
            return
        per, total = m.gpu_split(self.c, self.summed, cid)
        self.app.push_screen(GpuSplitScreen(per, total, self.open_drill))

    def action_split_summed(self) -> None:
        self.action_per_gpu()

    def action_notes(self) -> None:
        self.app.push_screen(NotesScreen(self.c))

    def action_code(self) -> None:
        cid = self.no_row("code")
        if cid is None:
            return
        self.app.push_screen(StackScreen(self.c, cid, getattr(self.app, "suspects", None)))

    def action_worst_cycle(self) -> None:
        cid = self.no_row("worst cycle")
        if cid is None:
            return
        if self.host_only:
            self.say(
                "worst cycle: a host-only comparison keeps each host phase's mean per cycle, "
                "not its time in every cycle (no GPU events to count): nothing to jump to"
            )
            return
        self.app.run_worker(
            lambda: (cid, m.worst_cycle(self.c, cid, self.events)),
            name="worst",
            thread=True,
            exit_on_error=False,
            group="worst",
            exclusive=True,
        )

    def action_whatif(self) -> None:
        cid = self.no_row("what if")
        if cid is None:
            return
        if self.host_only:
            self.say(f"what if: replay needs GPU operations. {why_not.HOST_ONLY}")
            return
        # summed over GPUs: the op on every GPU
        take = self.summed_ids.get(cid, [cid]) if self.gpu == m.SUMMED else [cid]
        label = cid if len(take) == 1 else f"{cid} on {len(take)} GPUs"
        self.notify(f"{label}: replaying head with it taken from base…")

        def work() -> tuple[str, Any]:
            from tracediff.replay import predict  # numpy/polars only; first call builds the graph

            return label, predict(self.c, take)

        self.app.run_worker(
            work, name="whatif", thread=True, exit_on_error=False, group="whatif", exclusive=True
        )

    def show_whatif(self, cid: str, w: Any) -> None:
        self.last_whatif = w
        self.notify(
            f"what if {cid} were as in base: {w.predicted_ms_per_cycle:.3f} ms/cycle "
            f"(head {w.head_ms_per_cycle:.3f}, base {w.base_ms_per_cycle:.3f}): "
            f"recovers {w.recovered_ms_per_cycle:+.3f} ms/cycle",
            timeout=12,
        )

    def jump(self, cid: str, found: tuple[int, float] | None) -> None:
        if found is None:
            self.notify(f"{cid}: no head cycles to compare", severity="warning")
            return
        self.cycle = found[0] if found[0] in self.cycle_ids else self.cycle
        self.show_cycle()
        row = self.c.attribution.filter(self.c.attribution["contributor_id"] == cid)
        proxy = row.height and row["kind"][0] in ("gap", "overlap")
        what = "GPU idle time (all causes)" if proxy else "its time"
        self.notify(f"{cid}: in cycle {found[0]} {what} is {found[1]:+.3f} ms off the base mean")

    @on(DataTable.RowHighlighted, "#attribution")
    def _highlighted(self) -> None:
        self.timeline.show(selected=self.table.current())

    @on(DataTable.RowSelected, "#attribution")
    def _selected(self) -> None:
        cid = self.table.current()
        if cid is None:
            return
        if self.gpu == m.SUMMED:  # a Σ row (enter on one goes to action_split_summed directly)
            self.action_per_gpu()
        else:
            self.open_drill(cid)

    @on(AttributionTable.NothingSelected)
    def _nothing_selected(self) -> None:
        self.no_row("drill-down")

    def open_drill(self, cid: str) -> None:
        """Drill-down of one contributor; its instances are collected in a worker."""
        row = self.c.attribution.filter(pl.col("contributor_id") == cid).row(0, named=True)
        name = row["name"]
        if self.host_only:
            self.say(
                f"drill-down lists a contributor's GPU operations; {name!r} is a host phase "
                f"(base {row['base_ms_per_cycle']:.3f} → head {row['head_ms_per_cycle']:.3f} ms "
                f"per cycle). {why_not.HOST_ONLY}"
            )
            return
        screen = DrillScreen(cid, name)
        self.app.push_screen(screen)
        self.app.run_worker(
            lambda: (screen, m.drill(self.c, cid, self.events)),
            name="drill",
            thread=True,
            exit_on_error=False,
            group="drill",
            exclusive=True,
        )
