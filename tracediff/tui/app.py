"""The tracediff TUI: `TracediffApp(comparison)` and `run_app(comparison)`.

Stage: presentation. Input: an in-memory `Comparison` (or a loader callable that produces one and
reports progress); never a path. Heavy work (indexing events, drill-down, worst-cycle search)
runs in thread workers; a worker that fails opens an `ErrorModal` instead of killing the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input
from textual.worker import Worker, WorkerState

from tracediff.engine.result import KINDS, Comparison
from tracediff.tui import model as m
from tracediff.tui.attribution import AttributionTable
from tracediff.tui.drilldown import DrillScreen
from tracediff.tui.edges import EdgeIndex
from tracediff.tui.gpusplit import GpuSplitScreen
from tracediff.tui.replay import CycleStrip
from tracediff.tui.screens import ErrorModal, HelpScreen, LoadingScreen, NotesScreen
from tracediff.tui.timeline import CELLS, LEGEND, Timeline
from tracediff.tui.verdict import Verdict

Loader = Callable[[Callable[[str], None]], Comparison]
"""Reads and compares the runs; calls its argument with progress messages."""

PLAY_INTERVAL_S = 0.5


class MainScreen(Screen[None]):
    """Verdict, attribution table, replay strip and timeline of one comparison."""

    BINDINGS = [
        Binding("question_mark", "app.help", "Help", key_display="?", tooltip="this list"),
        Binding("q", "app.quit", "Quit"),
        Binding("left", "step(-1)", "Prev cycle", key_display="←"),
        Binding("right", "step(1)", "Next cycle", key_display="→"),
        Binding("space", "play", "Play/pause", tooltip="step through the cycles"),
        Binding("slash", "search", "Search", key_display="/", tooltip="filter by name substring"),
        Binding(
            "s", "sort", "Sort", tooltip="|change|, change ↓, change ↑, head ms, base ms, name"
        ),
        Binding("k", "filter_kind", "Kind", tooltip="cycle the kind filter: all, then each kind"),
        Binding(
            "g",
            "filter_gpu",
            "GPU",
            tooltip="cycle the GPU filter: all, Σ summed over GPUs (multi-GPU), then each GPU",
        ),
        Binding(
            "p",
            "per_gpu",
            "Per GPU",
            tooltip="the selected contributor on each GPU, with its sum over GPUs (multi-GPU)",
        ),
        Binding(
            "m",
            "worst_cycle",
            "Worst cycle",
            tooltip="jump to the cycle where the selected contributor is furthest from base mean",
        ),
        Binding("plus,equals_sign", "zoom(0.5)", "Zoom in", key_display="+"),
        Binding("minus", "zoom(2)", "Zoom out", key_display="-"),
        Binding("left_square_bracket", "pan(-0.25)", "Pan left", key_display="["),
        Binding("right_square_bracket", "pan(0.25)", "Pan right", key_display="]"),
        Binding("0", "fit", "Fit cycle", tooltip="show the whole cycle"),
        Binding("a", "align", "Align head", tooltip="draw head so ops matched to base line up"),
        Binding(
            "e",
            "toggle_edges",
            "Event edges",
            tooltip="show/hide cross-stream CUDA event edges on the timeline (runs that have them)",
        ),
        Binding("w", "notes", "Warnings", tooltip="environment differences and warnings"),
        Binding(
            "x",
            "whatif",
            "What if",
            tooltip="replay head with the selected contributor taken from base: predicted cycle time",
        ),
        Binding("escape", "clear_search", "Clear search", show=False),
    ]

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
        self.kinds = [k for k in KINDS if k in set(comparison.attribution["kind"].to_list())]
        self.gpus = sorted(
            {int(d) for d in comparison.attribution["device_id"].drop_nulls().to_list()}
        )
        self.model: m.TimelineModel | None = None
        self.summed, self.summed_ids = m.summed_rows(comparison)

    def compose(self) -> ComposeResult:
        yield Verdict(self.c, id="verdict")
        with Vertical(id="body"):
            yield AttributionTable(id="attribution")
            yield CycleStrip(self.spans, id="replay")
            yield Timeline(id="timeline")
        yield Input(placeholder="search contributor name (enter: keep, escape: clear)", id="search")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#search").display = False
        self.query_one("#attribution").border_title = "attribution"
        self.query_one("#replay").border_title = "replay"
        self.timer = self.set_interval(PLAY_INTERVAL_S, self._tick, pause=True)
        self._refresh_table()
        self._show_cycle()
        # index the events only once the first frame is out: the worker competes for the CPU
        self.call_after_refresh(
            self.app.run_worker,
            lambda: m.TimelineModel(self.c, edges=False),
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

    def _show_cycle(self) -> None:
        self.query_one(CycleStrip).show(self.cycle, self.playing)
        self.timeline.show(cycle=self.cycle)

    def set_model(self, model: m.TimelineModel) -> None:
        self.model = model
        self.timeline.set_model(model)
        # cross-stream event edges next, in their own worker: the bars need not wait for them
        self.app.run_worker(
            lambda: (model, EdgeIndex(self.c, model.lane_ids)),
            name="edges",
            thread=True,
            exit_on_error=False,
        )

    def set_edges(self, model: m.TimelineModel, edges: EdgeIndex) -> None:
        model.edges = edges
        self.timeline.show()  # repaint with the marks
        self.refresh_bindings()  # the event-edge key shows once edges are known to exist

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # keys that mean nothing for these runs stay out of the footer (and do nothing)
        if action == "per_gpu":
            return bool(self.summed.height)
        if action == "split_summed":  # enter on a Σ row (AttributionTable's first enter binding)
            return self.gpu == m.SUMMED
        if action == "toggle_edges":
            return self.model is not None and self.model.edges.total > 0
        return True

    # --- actions -----------------------------------------------------------------------------
    def action_step(self, delta: int) -> None:
        i = self.cycle_ids.index(self.cycle) + delta
        self.cycle = self.cycle_ids[max(0, min(len(self.cycle_ids) - 1, i))]
        self._show_cycle()

    def action_play(self) -> None:
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
        opts: list[str | None] = [None, *self.kinds]
        self.kind = opts[(opts.index(self.kind) + 1) % len(opts)]
        self._refresh_table()

    def action_filter_gpu(self) -> None:
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
        self.timeline.zoom(factor)

    def action_pan(self, frac: float) -> None:
        self.timeline.pan(frac)

    def action_fit(self) -> None:
        self.timeline.show(window=None, t0=0)

    def action_align(self) -> None:
        self.timeline.show(align=not self.timeline.align)

    def action_toggle_edges(self) -> None:
        self.timeline.show(edges=not self.timeline.edges)

    def action_per_gpu(self) -> None:
        cid = self.table.current()
        if cid is None:
            return
        per, total = m.gpu_split(self.c, self.summed, cid)
        self.app.push_screen(GpuSplitScreen(per, total, self.open_drill))

    def action_split_summed(self) -> None:
        self.action_per_gpu()

    def action_notes(self) -> None:
        self.app.push_screen(NotesScreen(self.c))

    def action_worst_cycle(self) -> None:
        cid = self.table.current()
        if cid is None:
            return
        self.app.run_worker(
            lambda: (cid, m.worst_cycle(self.c, cid)),
            name="worst",
            thread=True,
            exit_on_error=False,
            group="worst",
            exclusive=True,
        )

    def action_whatif(self) -> None:
        cid = self.table.current()
        if cid is None:
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

    def open_drill(self, cid: str) -> None:
        """Drill-down of one contributor; its instances are collected in a worker."""
        name = self.c.attribution.filter(self.c.attribution["contributor_id"] == cid)["name"][0]
        screen = DrillScreen(cid, name)
        self.app.push_screen(screen)
        self.app.run_worker(
            lambda: (screen, m.drill(self.c, cid)),
            name="drill",
            thread=True,
            exit_on_error=False,
            group="drill",
            exclusive=True,
        )


class TracediffApp(App[None]):
    """Browse a Comparison. Give it the result, or a loader that computes it (progress shown)."""

    CSS_PATH = "tracediff.tcss"
    TITLE = "tracediff"
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False)]

    def __init__(
        self, comparison: Comparison | None = None, *, loader: Loader | None = None
    ) -> None:
        super().__init__()
        if (comparison is None) == (loader is None):
            raise ValueError("give either a comparison or a loader")
        self.comparison = comparison
        self.loader = loader

    def on_mount(self) -> None:
        if self.comparison is not None:
            self.push_screen(MainScreen(self.comparison))
            return
        loading = LoadingScreen()
        self.push_screen(loading)
        loader = self.loader
        assert loader is not None

        def say(msg: str) -> None:
            self.call_from_thread(loading.say, msg)

        self.run_worker(lambda: loader(say), name="load", thread=True, exit_on_error=False)

    @property
    def main(self) -> MainScreen | None:
        return next((s for s in self.screen_stack if isinstance(s, MainScreen)), None)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        w = event.worker
        if event.state == WorkerState.ERROR:
            err = w.error
            msg = str(err) if err is not None else "unknown error"
            self.push_screen(
                ErrorModal(f"{w.name} failed", f"{type(err).__name__}: {msg}"),
                callback=(lambda _: self.exit()) if w.name == "load" else None,
            )
            return
        if event.state != WorkerState.SUCCESS:
            return
        main = self.main
        result: Any = w.result
        if w.name == "load":
            self.comparison = result
            self.switch_screen(MainScreen(result))
        elif w.name == "index" and main is not None:
            main.set_model(result)
        elif w.name == "edges" and main is not None:
            main.set_edges(*result)
        elif w.name == "worst" and main is not None:
            main.jump(*result)
        elif w.name == "whatif" and main is not None:
            main.show_whatif(*result)
        elif w.name == "drill":
            screen, d = result
            if screen.is_attached:
                screen.set_drill(d)

    def action_help(self) -> None:
        main = self.main
        keys = [
            (b.key_display or b.key, b.description + (f": {b.tooltip}" if b.tooltip else ""))
            for b in (main.BINDINGS if main else [])
            if isinstance(b, Binding)
        ]
        keys += [
            ("↑/↓", "move in the attribution table"),
            ("enter", "drill down into the contributor (Σ view: split it by GPU)"),
        ]
        legend = Text()
        for code, name in LEGEND:
            ch, style = CELLS[code]
            legend.append(ch * 2, style)
            legend.append(f" {name}  ")
        self.push_screen(HelpScreen(keys, legend))


def run_app(
    comparison: Comparison | None = None, *, loader: Loader | None = None, **kw: Any
) -> None:
    """Run the TUI until the user quits (the CLI has already loaded and compared the runs)."""
    TracediffApp(comparison, loader=loader).run(**kw)
