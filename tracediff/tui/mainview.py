"""The main screen's state and widgets: what it shows, and the events it fetches to show it.

Stage: presentation. Input: an in-memory `Comparison`. `MainView` holds the screen's state (sort,
filters, cycle, GPUs shown, the timeline's model), lays out the verdict, notes line, attribution
table, replay strip and timeline, and redraws them from that state. The timeline shows the GPU
filter's GPU (else the first GPUs whose lanes fit its height) and only those GPUs' events of the
cycles shown are fetched, in the app's thread workers (tui/eventcache.py); the app hands their
results back (`set_model`, `events_loaded`, `set_edges`). `say` and the `no_*` checks are how a
key that cannot act says why (`reasons.py`). The keys themselves: main.py's `MainScreen`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input

from tracediff.engine.result import KINDS, Comparison
from tracediff.report.text import safe
from tracediff.tui import model as m
from tracediff.tui import reasons as why_not
from tracediff.tui import timelinemodel as tm
from tracediff.tui.attribution import AttributionTable
from tracediff.tui.edges import EdgeIndex
from tracediff.tui.eventcache import EventCache
from tracediff.tui.fit import timeline_rows
from tracediff.tui.notes import NotesLine
from tracediff.tui.replay import CycleStrip
from tracediff.tui.timeline import Timeline
from tracediff.tui.verdict import Verdict


def without_notes(c: Comparison) -> Comparison:
    """`c` without its warnings and environment differences, for the verdict panel: the main
    screen shows them as one line of its own (`notes.NotesLine`), the full list behind `w`.
    The same frames in a new Comparison: its events (built on first access) are never built,
    as the verdict does not read them."""
    return replace(c, warnings=(), env_diffs=())


class MainView(Screen[None]):
    """The main screen's state, widgets and event fetching (its keys: main.MainScreen)."""

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
        self.host_only = why_not.is_host_only(comparison)  # engine/hostonly.py: host ranges, no GPU
        self.last_note: str | None = None
        self.edges_ready = False
        self.edges_why: tuple[str | None] | None = None  # edges_missing's answer, once known
        self.gpus = sorted(
            {int(d) for d in comparison.attribution["device_id"].drop_nulls().to_list()}
        )
        self.model: tm.TimelineModel | None = None
        # the events, fetched for the GPUs and cycles shown (and a drilled-down one's GPU)
        self.events = EventCache(comparison)
        self.lane_rows = 1  # lanes the timeline has room for (fit_height)
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
        self.fit_height()

    def fit_height(self) -> None:
        """The table keeps its rows on a short terminal; the timeline gives (tui/fit.py)."""
        verdict = len(self.query_one(Verdict).render().plain.splitlines())  # type: ignore[union-attr]
        notes = 1 if self.query_one(NotesLine).count else 0
        rows = timeline_rows(self.app.size.height, verdict, notes)
        self.timeline.styles.max_height = rows
        # its top border, the axis, then two rows a lane (the legend goes first when short)
        self.lane_rows = max(1, (rows - 2) // 2)
        self._show_gpus()

    # --- state -> widgets --------------------------------------------------------------------
    @property
    def table(self) -> AttributionTable:
        return self.query_one(AttributionTable)

    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def refresh_table(self) -> None:
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

    def show_cycle(self) -> None:
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
