"""Timeline widget: one cycle of base above head, one lane per GPU (per stream where several).

Stage: presentation. Input: a `TimelineModel` (tui/timelinemodel.py: the GPUs shown, their
events fetched when first shown) and the view (cycle, window, selection, event edges on/off);
output: Rich text. Bars are cell codes from `TimelineModel.render` (vectorised
bucketing), drawn as runs of equal cells, so a redraw is O(columns), independent of how many
operations the cycle holds. Cross-stream CUDA event edges are letter pairs over the bars: `A` on
the recording lane where the recorded work ended, `a` on the waiting lane where the waiting
stream went on (bright: it waited on that event; dim: something else held it longer).
"""

from __future__ import annotations

import math

import numpy as np
from rich.text import Text
from textual.geometry import Size
from textual.widget import Widget

from tracediff.tui import model as m
from tracediff.tui import timelinemodel as tm

LABEL = 11  # width of the lane label column

CELLS: dict[int, tuple[str, str]] = {
    m.OUT: (" ", ""),
    m.IDLE: ("─", "#4e4e4e"),
    m.KERNEL: ("█", "#5f87d7"),
    m.MEMSET: ("█", "#af87d7"),
    m.MEMCPY: ("█", "#d7af5f"),
    m.COLLECTIVE: ("█", "#5fd787"),
    m.OTHER: ("█", "#a8a8a8"),
    m.CHANGED: ("▒", "#ff5f5f"),
    m.SELECTED: ("█", "bold #ffff00"),
}
RECORD_STYLE = "bold #000000 on #d787ff"
WAITED_STYLE = "bold #000000 on #5fffff"  # the target started as soon as the event completed
HELD_STYLE = "#bcbcbc on #005f5f"  # something else held the target longer
LETTERS = 26  # edges beyond the 26th in a window are drawn unlabelled


def mark_cell(mark: int, waited: np.ndarray) -> tuple[str, str]:
    """Character and style of an edge mark (`edges.mark_grid`'s id: 2k record, 2k + 1 wait)."""
    k, wait = divmod(mark, 2)
    if k < LETTERS:
        ch = chr((ord("a") if wait else ord("A")) + k)
    else:
        ch = "○" if wait else "●"
    if not wait:
        return ch, RECORD_STYLE
    return ch, WAITED_STYLE if bool(waited[k]) else HELD_STYLE


LEGEND = (
    (m.KERNEL, "kernel"),
    (m.MEMCPY, "memcpy"),
    (m.MEMSET, "memset"),
    (m.COLLECTIVE, "collective"),
    (m.CHANGED, "added/removed"),
    (m.SELECTED, "selected"),
    (m.IDLE, "idle"),
)


def nice_step(span: float, ticks: int) -> float:
    """A 1/2/5 x 10^k step that gives about `ticks` ticks over `span`."""
    raw = span / max(ticks, 1)
    if raw <= 0:
        return 1.0
    p: float = 10 ** math.floor(math.log10(raw))
    return next(k * p for k in (1, 2, 5, 10) if k * p >= raw)


def axis(t0_ns: int, t1_ns: int, width: int) -> Text:
    """Tick labels in ms at their columns."""
    span = t1_ns - t0_ns
    step = nice_step(span / 1e6, max(1, width // 10)) * 1e6
    line = [" "] * width
    t = math.ceil(t0_ns / step) * step
    while t <= t1_ns:
        col = int((t - t0_ns) / span * width)
        digits = max(0, -int(math.floor(math.log10(step / 1e6)))) if step < 1e6 else 0
        label = f"╵{t / 1e6:.{digits}f}"
        if col + len(label) <= width and all(
            c == " " for c in line[max(0, col - 1) : col + len(label)]
        ):
            line[col : col + len(label)] = label
        t += step
    return Text("".join(line), style="#8a8a8a")


def row_text(
    codes: np.ndarray, marks: np.ndarray | None = None, waited: np.ndarray | None = None
) -> Text:
    """One lane: runs of equal cells become one styled segment each; an edge mark (`marks` >= 0)
    replaces its cell."""
    text = Text()
    if codes.size == 0:
        return text
    key = codes.astype(np.int64)
    if marks is not None:
        key = key + (marks.astype(np.int64) + 1) * 256  # a mark cell is a run of its own
    cuts = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [codes.size]])
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        mark = -1 if marks is None else int(marks[a])
        if mark >= 0 and waited is not None:
            ch, style = mark_cell(mark, waited)
        else:
            ch, style = CELLS[int(codes[a])]
        text.append(ch * (b - a), style)
    return text


def edge_legend() -> Text:
    t = Text()
    t.append("A", RECORD_STYLE)
    t.append("→")
    t.append("a", WAITED_STYLE)
    t.append(" event record→wait, ")
    t.append("a", HELD_STYLE)
    t.append(" held by other work ")
    return t


class Timeline(Widget):
    """The selected cycle's operations on a shared time axis starting at the cycle start."""

    DEFAULT_CSS = """
    Timeline { height: auto; min-height: 4; }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id)
        self.model: tm.TimelineModel | None = None
        self.cycle = 0
        self.t0 = 0
        self.window: int | None = None  # None: the whole cycle
        self.selected: str | None = None
        self.align = False
        self.edges = True  # draw cross-stream CUDA event edges where the runs have them
        self.last_rows: tm.TimelineRows | None = None
        self._cache: tuple[tuple[object, ...], Text] | None = None
        # what the timeline says when the comparison has no GPU operation to draw (set by the
        # screen, which knows why: a host-only comparison); None: a generic line
        self.no_events_reason: str | None = None

    # --- view -------------------------------------------------------------------------------
    def set_model(self, model: tm.TimelineModel) -> None:
        self.model = model
        self.show()
        self.refresh(layout=True)  # the number of lanes is known now

    def has_lanes(self) -> bool:
        """Something to draw: the event index is in and holds at least one GPU lane."""
        return self.model is not None and bool(self.model.lanes)

    def show(self, **view: object) -> None:
        for k, v in view.items():
            setattr(self, k, v)
        if self.model is not None and not self.model.lanes:
            self.border_title = f"timeline · cycle {self.cycle} · no GPU events"
            self.refresh()
            return
        t0, t1 = self.span()
        self.border_title = (
            f"timeline · cycle {self.cycle} · {t0 / 1e6:.3f}–{t1 / 1e6:.3f} ms"
            + (" · head aligned to base" if self.align else "")
            + self._edges_title()
        )
        # same lanes, same height: repaint this widget only, no layout pass over the screen
        self.refresh()

    def has_edges(self) -> bool:
        return self.model is not None and self.model.edges.total > 0

    def _edges_title(self) -> str:
        if not self.has_edges():
            return ""
        if not self.edges:
            return " · event edges hidden"
        assert self.model is not None
        n = {s: self.model.edges.count(s, self.cycle) for s in m.SIDES}
        return " · event waits " + " ".join(f"{s} {'—' if v is None else v}" for s, v in n.items())

    def span(self) -> tuple[int, int]:
        """The visible window [t0, t1) in ns."""
        full = self.model.full_span(self.cycle) if self.model else 1
        w = min(self.window or full, full) if self.window else full
        t0 = int(min(max(self.t0, 0), max(full - w, 0)))
        return t0, t0 + max(int(w), 1000)

    def zoom(self, factor: float) -> None:
        t0, t1 = self.span()
        full = self.model.full_span(self.cycle) if self.model else 1
        w = max(
            1000, int((t1 - t0) * factor)
        )  # 1 µs: below that, columns are below clock resolution
        mid = (t0 + t1) // 2
        self.show(window=None if w >= full else w, t0=max(0, mid - w // 2))

    def pan(self, frac: float) -> None:
        t0, t1 = self.span()
        self.show(t0=max(0, int(t0 + frac * (t1 - t0))), window=t1 - t0 if self.window else None)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.model is not None and not self.model.lanes:  # the reason there is nothing to draw
            return len(self._no_events().wrap(self.app.console, max(width, 1)))
        lanes = len(self.model.lanes) if self.model else 1
        return 2 + 2 * lanes

    def _no_events(self) -> Text:
        return Text(
            self.no_events_reason or "no GPU events in these runs: nothing to draw", style="italic"
        )

    def render(self) -> Text:
        if self.model is None:
            return Text("indexing events…", style="italic")
        if not self.model.lanes:
            return self._no_events()
        if not self.model.loaded(self.cycle):  # a worker is fetching them (main.py)
            gpus = self.model.shown
            which = f"GPU {gpus[0]}" if len(gpus) == 1 else f"GPUs {gpus[0]}–{gpus[-1]}"
            return Text(f"fetching the events of cycle {self.cycle} on {which}…", style="italic")
        width = max(self.content_size.width, LABEL + 10)
        t0, t1 = self.span()
        view = (self.cycle, t0, t1, width, self.selected, self.align, self.edges)
        # edges arrive after the bars; the lanes change with the GPUs shown
        key = (*view, id(self.model), id(self.model.edges), self.model.version)
        if self._cache and self._cache[0] == key:
            return self._cache[1]
        bar_w = width - LABEL
        rows = self.model.render(
            self.cycle, t0, t1, bar_w, self.selected, self.align, edges=self.edges
        )
        self.last_rows = rows
        out = Text(no_wrap=True, overflow="crop")
        out.append(" " * LABEL)
        out.append_text(axis(t0, t1, bar_w))
        for i, lane in enumerate(rows.lanes):
            for side in m.SIDES:
                label = f"{lane.label if side == 'base' else '':<6}{side}"
                out.append("\n")
                out.append(f"{label:<{LABEL}}"[:LABEL], "bold" if side == "head" else "")
                if rows.span_ns[side] is None:
                    out.append(f"(no cycle {self.cycle} in {side})", "italic #8a8a8a")
                else:
                    marks = rows.marks.get(side) if rows.marks else None
                    out.append_text(
                        row_text(
                            rows.codes[side][i],
                            None if marks is None else marks[i],
                            rows.waited[side] if rows.waited else None,
                        )
                    )
        out.append("\n")
        if rows.marks is not None:
            out.append_text(edge_legend())
        for code, name in LEGEND:
            ch, style = CELLS[code]
            out.append(ch, style)
            out.append(f"{name} ")
        self._cache = (key, out)
        return out
