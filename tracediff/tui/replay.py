"""Replay strip: per-cycle GPU span of both runs as sparklines, with the selected cycle marked.

Stage: presentation. Input: per-side (cycle ids, span ms) from `model.cycle_spans`; output: three
lines of Rich text. Both sides share one scale so outlier cycles stand out against each other.
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.widget import Widget

from tracediff.tui import model as m

LABEL = 6


class CycleStrip(Widget):
    """Where the selected cycle sits among all cycles of both runs."""

    DEFAULT_CSS = """
    CycleStrip { height: 4; }
    """

    def __init__(
        self,
        spans: dict[str, tuple[np.ndarray, np.ndarray]],
        *,
        id: str | None = None,  # noqa: A002
    ) -> None:
        super().__init__(id=id)
        self.spans = spans
        self.cycle = 0
        self.playing = False
        allv = np.concatenate([v for _, v in spans.values()])
        self.lo = float(allv.min()) if allv.size else 0.0
        self.hi = float(allv.max()) if allv.size else 1.0

    def show(self, cycle: int, playing: bool) -> None:
        self.cycle, self.playing = cycle, playing
        self.refresh()

    def span_ms(self, side: str, cycle: int) -> float | None:
        ids, v = self.spans[side]
        i = np.searchsorted(ids, cycle)
        return float(v[i]) if i < ids.size and ids[i] == cycle else None

    def render(self) -> Text:
        width = max(self.content_size.width - LABEL, 1)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(
            "▶ playing  " if self.playing else "❚❚ paused  ", "bold" if self.playing else "#8a8a8a"
        )
        t.append(f"cycle {self.cycle}")
        for side in m.SIDES:
            v = self.span_ms(side, self.cycle)
            t.append(f"   {side} " + (f"{v:.3f} ms" if v is not None else "—"))
        t.append(f"   (scale {self.lo:.2f}–{self.hi:.2f} ms)", "#8a8a8a")
        for side in m.SIDES:
            ids, vals = self.spans[side]
            line = Text(
                m.spark(vals, width, self.lo, self.hi),
                style="#5f87d7" if side == "base" else "#d7af5f",
            )
            i = int(np.searchsorted(ids, self.cycle))
            if i < ids.size and ids[i] == self.cycle:
                col = m.column_of(i, ids.size, width)
                line.stylize("reverse", col, col + 1)
            t.append(f"\n{side:<{LABEL}}")
            t.append_text(line)
        return t
