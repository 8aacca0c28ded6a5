"""The main screen: verdict, notes line, attribution table, replay strip and timeline.

Stage: presentation. Input: an in-memory `Comparison`. Keys act on the screen's state (sort,
filters, cycle, timeline window); heavy work (fetching events, event edges, drill-down, worst
cycle, what-if) goes to the app's thread workers. The timeline shows the GPU filter's GPU (else
the first GPUs whose lanes fit its height) and only those GPUs' events of the cycles shown are
fetched (tui/eventcache.py). A key that cannot act for these runs says why (`reasons.py`)
instead of doing nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import polars as pl
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input

from tracediff.engine.result import KINDS, Comparison
from tracediff.report.text import safe
from tracediff.tui import model as m
from tracediff.tui import reasons as why_not
from tracediff.tui import timelinemodel as tm
from tracediff.tui.attribution import AttributionTable
from tracediff.tui.drilldown import DrillScreen
from tracediff.tui.edges import EdgeIndex
from tracediff.tui.eventcache import EventCache
from tracediff.tui.fit import timeline_rows
from tracediff.tui.gpusplit import GpuSplitScreen
from tracediff.tui.keys import KEYS
from tracediff.tui.notes import NotesLine
from tracediff.tui.replay import CycleStrip
from tracediff.tui.screens import NotesScreen, StackScreen
from tracediff.tui.timeline import Timeline
from tracediff.tui.verdict import Verdict

PLAY_INTERVAL_S = 0.5


def without_notes(c: Comparison) -> Comparison:
    """`c` without its warnings and environment differences, for the verdict panel: the main
    screen shows them as one line of its own (`notes.NotesLine`), the full list behind `w`.
    A shallow copy: the events (built on first access) are not touched."""
    v = copy.copy(c)
    v.warnings, v.env_diffs = [], []
    return v


class MainScreen(Screen[None]):
    """Verdict, attribution table, replay strip and timeline of one comparison."""

    BINDINGS = KEYS

    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.c = comparison
        self.sort = next(iter(m.SORTS))
        self.kind: str | None = None
        self.gpu: int | str | None = None  # None: every GPU's rows; m.SUMMED: summed over GPUs
        self.query_text = ""
        self.last_whatif: Any = None
        self.spans = m.cycle_spans(comparison)
        self.cycle_ids = sorted({int(x) for ids, _ in self.spans.values() for x in ids}) or [0]
        self.cycle = self.cycle_ids[0]
        self.playing = False
        present = set(comparison.attribution["kind"].to_list())
        # the engine's kinds in their order, then any other ("host" in a host-only comparison)
        self.kinds = [k for k in KINDS if k in present] + sorted(present - set(KINDS))
        self.host_only = why_not.is_host_only(comparison)  # engine/host.py: host ranges, no GPU
        self.last_note: str | None = None
        self.edges_ready = False
        self.edges_why: tuple[str | None] | None = None  # edges_missing's answer, once known
        self.gpus = sorted(
            {int(d) for d in comparison.attribution["device_id"].drop_nulls().to_list()}
        )
        self.model: tm.TimelineModel | None = None
        # the events, fetched for the GPUs and cycles shown (and a drilled-down one's GPU)
        self.events = EventCache(comparison)
        self.lane_rows = 1  # lanes the timeline has room for (_fit)
        self.timeline_all = sorted({int(d) for d in comparison.cycles["device_id"].drop_nulls()})
        self.summed, self.summed_ids = m.summed_rows(comparison)

    def compose(self) -> ComposeResult:
        yield Verdict(without_notes(self.c), id="verdict")
        yield NotesLine(self.c, id="notes")
        with Vertical(id="body"):
            yield AttributionTable(
                multi_gpu=len(self.gpus) > 1,
                runs=(self.c.base.runs, self.c.head.runs),
                id="attribution",
            )
            yield CycleStrip(self.spans, id="replay")
            yield Timeline(id="timeline")
        yield Input(placeholder="search contributor name (enter: keep, escape: clear)", id="search")
        yield Footer()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The table keeps its rows on a short terminal; the timeline gives (tui/fit.py)."""
        verdict = len(self.query_one(Verdict).render().plain.splitlines())  # type: ignore[union-attr]
        notes = 1 if self.query_one(NotesLine).count else 0
        rows = timeline_rows(self.app.size.height, verdict, notes)
        self.timeline.styles.max_height = rows
        # its top border, the axis, then two rows a lane (the legend goes first when short)
        self.lane_rows = max(1, (rows - 2) // 2)
        self._show_gpus()

    def on_mount(self) -> None:
        self._fit()
        self.query_one("#search").display = False
        self.query_one("#attribution").border_title = "attribution"
        self.query_one("#replay").border_title = (
            "replay · host range wall time per cycle" if self.host_only else "replay"
        )
        if self.host_only:
            self.timeline.no_events_reason = why_not.HOST_ONLY
        self.timer = self.set_interval(PLAY_INTERVAL_S, self._tick, pause=True)
        self._refresh_table()
        self._show_cycle()
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

    # --- state -> widgets --------------------------------------------------------------------
    @property
    def table(self) -> AttributionTable:
        return self.query_one(AttributionTable)

    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def _refresh_table(self) -> None:
        summed = self.gpu == m.SUMMED
        view = m.table_view(
            self.summed if summed else self.c.attribution,
            self.sort,
            self.kind,
            None if summed or self.gpu is None else int(self.gpu),
            self.query_text,
        )
        self.table.populate(view, keep=self.table.current())
        self.refresh_bindings()  # enter splits a Σ row by GPU, drills down otherwise
        parts = [
            f"sort {self.sort}",
            f"kind {self.kind or 'all'}",
            "GPU all"
            if self.gpu is None
            else "Σ summed over GPUs"
            if summed
            else f"GPU {self.gpu}",
        ]
        if self.query_text:
            parts.append(f"name ~ {self.query_text!r}")
        total = (self.summed if summed else self.c.attribution).height
        self.table.border_title = f"attribution · {view.height}/{total} · " + " · ".join(parts)
        self.timeline.show(selected=self.table.current())
        self._show_gpus()

    def _show_cycle(self) -> None:
        self.query_one(CycleStrip).show(self.cycle, self.playing)
        self.timeline.show(cycle=self.cycle)
        self._want_events()

    def timeline_gpus(self, lanes: Callable[[int], int]) -> list[int]:
        """The GPUs the timeline shows (tm.gpus_on_screen); `lanes(gpu)`: the lanes each takes."""
        return tm.gpus_on_screen(self.timeline_all, self.gpu, self.lane_rows, lanes)

    def _show_gpus(self) -> None:
        """The timeline follows the GPU filter and the terminal's height (nothing to do before
        the first events are in: the index worker fetches for the GPUs shown then)."""
        model = self.model
        if model is None:
            return
        if model.show_devices(self.timeline_gpus(model.lanes_per_gpu)):
            self.timeline.refresh(layout=True)  # another number of lanes
            self.timeline.show()
            self._want_events()

    def _want_events(self) -> None:
        """Fetch the shown cycle's events of the shown GPUs in a worker, if they are not in."""
        model = self.model
        if model is None or model.loaded(self.cycle):
            return
        cycle = self.cycle
        self.app.run_worker(
            lambda: (model, model.load(cycle)),
            name="events",
            thread=True,
            exit_on_error=False,
            group="events",
        )

    def events_loaded(self, model: tm.TimelineModel, new_lanes: bool) -> None:
        if model is not self.model:
            return
        if new_lanes:
            self.timeline.refresh(layout=True)
        self.timeline.show()

    def set_model(self, model: tm.TimelineModel) -> None:
        self.model = model
        self.timeline.set_model(model)
        self._show_gpus()  # the filter or the terminal may have changed while it was fetching
        self._want_events()
        # cross-stream event edges next, in their own worker: the bars need not wait for them
        self.app.run_worker(
            lambda: (model, EdgeIndex(self.c, model.lane_ids)),
            name="edges",
            thread=True,
            exit_on_error=False,
        )

    def set_edges(self, model: tm.TimelineModel, edges: EdgeIndex) -> None:
        model.edges = edges
        self.edges_ready = True
        self.timeline.show()  # repaint with the marks
        self.refresh_bindings()  # the event-edge key shows once edges are known to exist

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

    # --- keys that cannot act say why ----------------------------------------------------------
    def say(self, msg: str) -> None:
        """Tell the user why a key did nothing (kept in `last_note` for tests)."""
        self.last_note = msg = safe(msg)  # it may hold a contributor's name
        self.notify(msg, markup=False, timeout=8)

    def no_timeline(self, key: str) -> bool:
        """True (and says why) when the timeline has nothing to act on for `key`."""
        why = why_not.no_timeline(self.host_only, self.model)
        if why is not None:
            self.say(f"{key}: {why}")
        return why is not None

    def no_row(self, key: str) -> str | None:
        """The highlighted contributor, or None (having said why) when the table is empty."""
        cid = self.table.current()
        if cid is None:
            hint = " (escape clears the search)" if self.query_text else ""
            self.say(f"{key}: no contributor selected: the table shows no rows{hint}")
        return cid

    def edges_missing(self) -> str | None:
        """Why the timeline has no cross-stream event edges to show (None: it has some)."""
        if self.edges_why is None:
            why = why_not.edges_missing(self.c, self.host_only, self.model, self.edges_ready)
            if not self.edges_ready:
                return why  # may change once the edges are in: not kept
            # kept: the reason may count head's API calls (millions of rows in a large run)
            self.edges_why = (why,)
        return self.edges_why[0]

    # --- actions -----------------------------------------------------------------------------
    def action_step(self, delta: int) -> None:
        i = self.cycle_ids.index(self.cycle) + delta
        if not 0 <= i < len(self.cycle_ids):
            end = "first" if i < 0 else "last"
            self.say(f"cycle {self.cycle} is the {end} of {len(self.cycle_ids)}")
            return
        self.cycle = self.cycle_ids[i]
        self._show_cycle()

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
        self._show_cycle()

    def _tick(self) -> None:
        if self.cycle == self.cycle_ids[-1]:
            self.action_play()  # stop at the last cycle
        else:
            self.action_step(1)

    def action_sort(self) -> None:
        names = list(m.SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        self._refresh_table()

    def action_filter_kind(self) -> None:
        if not self.kinds:
            self.say("kind filter: the table has no rows")
            return
        opts: list[str | None] = [None, *self.kinds]
        self.kind = opts[(opts.index(self.kind) + 1) % len(opts)]
        self._refresh_table()

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
        self._refresh_table()

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
        self._refresh_table()

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
        self._show_cycle()
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
