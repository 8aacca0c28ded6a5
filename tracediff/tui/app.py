"""The tracediff TUI: `TracediffApp(comparison)` and `run_app(comparison)` (the screen: main.py, its
state and widgets mainview.py).

Stage: presentation. Input: an in-memory `Comparison` (or a loader callable that produces one and
reports progress); never a path. Heavy work (indexing events, drill-down, worst-cycle search)
runs in thread workers; a worker that fails opens an `ErrorModal` instead of killing the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from tracediff.engine.result import Comparison
from tracediff.report.numbers import settled_comparison
from tracediff.suspects import Suspects
from tracediff.tui import reasons as why_not
from tracediff.tui.main import MainScreen
from tracediff.tui.screens import ErrorModal, HelpScreen, LoadingScreen
from tracediff.tui.timeline import CELLS, LEGEND

Loader = Callable[[Callable[[str], None]], Comparison]
"""Reads and compares the runs; calls its argument with progress messages."""

__all__ = ["Loader", "MainScreen", "TracediffApp", "run_app"]


class TracediffApp(App[None]):
    """Browse a Comparison. Give it the result, or a loader that computes it (progress shown)."""

    CSS_PATH = "tracediff.tcss"
    TITLE = "tracediff"
    BINDINGS = [Binding("ctrl+c", "quit", "Quit", show=False)]

    def __init__(
        self,
        comparison: Comparison | None = None,
        *,
        loader: Loader | None = None,
        suspects: Suspects | None = None,
    ) -> None:
        super().__init__()
        if (comparison is None) == (loader is None):
            raise ValueError("give either a comparison or a loader")
        # printed at the reports' precision: the same screen on every CPU (report/numbers.py)
        self.comparison = None if comparison is None else settled_comparison(comparison)
        self.loader = loader
        self.suspects = suspects  # `compare --repo`: the suspect commits (the stack view)

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
            title, text = why_not.error_modal(w.name or "", w.error)
            self.push_screen(
                ErrorModal(title, text),
                callback=(lambda _: self.exit()) if w.name == "load" else None,
            )
            return
        if event.state != WorkerState.SUCCESS:
            return
        main = self.main
        result: Any = w.result
        if w.name == "load":
            self.comparison = result = settled_comparison(result)
            self.switch_screen(MainScreen(result))
        elif w.name == "index" and main is not None:
            main.set_model(result)
        elif w.name == "events" and main is not None:
            main.events_loaded(*result)
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
            if isinstance(b, Binding) and not b.action.startswith("why(")
        ]
        keys += [
            ("↑/↓", "move in the attribution table"),
            ("enter", "drill down into the contributor (Σ view: split it by GPU)"),
            ("shift+←/→ < >", "scroll the attribution table sideways (columns beyond the name)"),
        ]
        legend = Text()
        for code, name in LEGEND:
            ch, style = CELLS[code]
            legend.append(ch * 2, style)
            legend.append(f" {name}  ")
        self.push_screen(HelpScreen(keys, legend))


def run_app(
    comparison: Comparison | None = None,
    *,
    loader: Loader | None = None,
    suspects: Suspects | None = None,
    **kw: Any,
) -> None:
    """Run the TUI until the user quits (the CLI has already loaded and compared the runs)."""
    TracediffApp(comparison, loader=loader, suspects=suspects).run(**kw)
