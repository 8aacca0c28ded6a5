"""Attribution table: contributors to the change, with sort, kind/GPU filters and name search.

Stage: presentation. Input: a frame from `model.table_view`; output: DataTable rows keyed by
contributor_id. Arrow keys left/right are left to the app (they step cycles), so the table's own
bindings are redeclared without them; shift+←/→ (or < >) scroll the table sideways.

Column widths follow the table's width (`layout`): the change, then the name, then the other
columns in order of use. The name gets what the columns that fit beside it leave (at
least `NAME_MIN`, at most the longest name); the columns that do not fit follow off-screen, a
sideways scroll away, so at 80 columns the name is on screen and nothing is out of reach.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable

from tracediff.report.text import safe

NAME = "name"
LEFT = (("change ms", 9, True),)
"""Before the name: what changed (`*`: significant)."""
RIGHT = (
    ("phase", 8, False),
    ("status", 9, False),
    ("base ms", 8, True),
    ("head ms", 8, True),
    ("share", 5, True),
    ("kind", 10, False),
    ("GPU", 3, True),
    ("95% CI", 17, False),
)
"""After the name, in the order they are kept on screen as the table narrows (the phase first:
it tells apart rows of one name, as the idle causes are in each phase)."""
RUNS = ("runs", 5, True)
"""Run-set comparisons only (first after the name): `✓4/4`, ✓ where the contributor moved the
same way in every run (`consistent`), k/N the runs of head it occurs in (of base, for a row that
head has none of)."""
NAME_MIN = 28
"""The name is never narrower than this (or the longest name, if shorter)."""
GUTTER = 2
"""Columns of the table's width the text cannot use: the vertical scrollbar."""


@dataclass(frozen=True)
class Layout:
    columns: tuple[tuple[str, int, bool], ...]  # (header, width, right-aligned), name included
    on_screen: int  # how many of them fit in the width given

    @property
    def width(self) -> int:
        return sum(w for _, w, _ in self.columns) + len(self.columns) - 1

    def header(self) -> str:
        return " ".join(fit(h, w, r) for h, w, r in self.columns)


def layout(width: int, longest_name: int, multi_gpu: bool = False, run_set: bool = False) -> Layout:
    """Columns for a table `width` characters wide whose longest name has `longest_name`.

    `multi_gpu`: the GPU column comes right after the status (with one GPU it says the same on
    every row, so it comes late). `run_set`: the runs column comes first after the name."""
    right = [RUNS, *RIGHT] if run_set else list(RIGHT)
    if multi_gpu:
        gpu = right.pop(next(i for i, c in enumerate(right) if c[0] == "GPU"))
        right.insert(next(i for i, c in enumerate(right) if c[0] == "status") + 1, gpu)
    lo = max(min(NAME_MIN, longest_name), len(NAME))
    room = width - sum(w + 1 for _, w, _ in LEFT)  # what the name and the right columns share
    fits = 0
    for _, w, _ in right:
        if room - (w + 1) < lo:
            break
        room -= w + 1
        fits += 1
    name_w = max(lo, min(max(longest_name, len(NAME)), room))
    cols = (*LEFT, (NAME, name_w, False), *right)
    return Layout(cols, len(LEFT) + 1 + fits)


def fit(text: str, width: int, right: bool) -> str:
    """`text` in exactly `width` characters: cut with an ellipsis, padded to its side."""
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.rjust(width) if right else text.ljust(width)


RENAMED = " → "
"""How the engine names an op renamed in the same place: `old → new`."""


def fit_name(name: str, width: int) -> str:
    """`name` in `width` characters. An `old → new` name too long for them keeps both ends, each
    cut (the new name given two thirds of the room when both are long): cut at the end, it read
    as the old kernel alone going from 0 to the new one's time."""
    old, sep, new = name.partition(RENAMED)
    room = width - len(RENAMED)
    if not sep or len(name) <= width or room < 8:
        return fit(name, width, False)
    a = len(old) if len(old) <= room // 3 else max(room // 3, room - len(new))
    return fit(old, a, False) + RENAMED + fit(new, room - a, False)


def runs_cell(r: dict[str, Any], runs: tuple[int, int]) -> str:
    """`✓4/4`: see RUNS."""
    mark = "✓" if r.get("consistent") else " "
    nb, nh = runs
    hr, br = r.get("head_runs") or 0, r.get("base_runs") or 0
    return f"{mark}{hr}/{nh}" if hr else f"{mark}{br}/{nb}"


def cells(r: dict[str, Any], lay: Layout, runs: tuple[int, int] = (1, 1)) -> Text:
    """One contributor as one pre-formatted line (one DataTable cell per row renders ~10x faster
    than ten, which keeps sort/filter redraws cheap). `runs`: the runs of base and head."""
    d = r["delta_ms_per_cycle"]
    sig = r["significant"]
    values = {
        "change ms": f"{d:+.3f}{'*' if sig else ' '}",
        "share": "-" if r["share"] is None else f"{100 * r['share']:.0f}%",
        NAME: safe(r["name"]),  # a name holding ESC[2J or a newline is shown inert, on one row
        "status": safe(r["status"]),
        "base ms": f"{r['base_ms_per_cycle']:.3f}",
        "head ms": f"{r['head_ms_per_cycle']:.3f}",
        "kind": safe(r["kind"]),
        "GPU": "Σ" if r.get("_summed") else "-" if r["device_id"] is None else str(r["device_id"]),
        "phase": safe(r.get("phase") or "-"),
        "95% CI": f"[{r['ci95_low']:+.3f},{r['ci95_high']:+.3f}]",
        "runs": runs_cell(r, runs),
    }
    t = Text(no_wrap=True)
    for i, (h, w, right) in enumerate(lay.columns):
        style = (("#ff5f5f" if d > 0 else "#5fd787") if sig else "") if i == 0 else ""
        if i:
            t.append(" ")
        t.append(fit_name(values[h], w) if h == NAME else fit(values[h], w, right), style)
    return t


class AttributionTable(DataTable[Text], inherit_bindings=False):
    """One row per contributor; enter opens its drill-down."""

    BINDINGS = [
        # first: in the Σ view (the screen's check_action enables it) enter splits the row by GPU
        Binding("enter", "screen.split_summed", "Per GPU", show=True),
        Binding("enter", "select_cursor", "Drill down", show=True),
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "scroll_top", "Top", show=False),
        Binding("end", "scroll_bottom", "Bottom", show=False),
        Binding("shift+right,greater_than_sign", "scroll_column(1)", "Scroll right", show=False),
        Binding("shift+left,less_than_sign", "scroll_column(-1)", "Scroll left", show=False),
    ]

    def __init__(
        self,
        *,
        multi_gpu: bool = False,
        runs: tuple[int, int] = (1, 1),
        id: str | None = None,  # noqa: A002
    ) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True, cell_padding=0)
        self.ids: list[str] = []
        self.multi_gpu = multi_gpu
        self.runs = runs  # base's and head's: a runs column when either has several
        self.view: pl.DataFrame | None = None
        self.lay: Layout | None = None

    class NothingSelected(Message):
        """Enter on an empty table (a search or filter that matches nothing)."""

    def action_select_cursor(self) -> None:
        if not self.ids:
            self.post_message(self.NothingSelected())  # the screen says why nothing opens
            return
        super().action_select_cursor()

    def text_width(self) -> int:
        """Characters a row may use before it needs a sideways scroll."""
        return max(self.size.width - GUTTER, 1)

    def _layout(self) -> Layout:
        longest = 0
        if self.view is not None and self.view.height:
            longest = int(self.view.select(pl.col("name").str.len_chars().max()).item() or 0)
        return layout(self.text_width(), longest, self.multi_gpu, run_set=max(self.runs) > 1)

    def populate(self, view: pl.DataFrame, keep: str | None = None) -> None:
        """Replace the rows; keep the cursor on contributor `keep` when it is still shown."""
        self.view = view
        lay = self._layout()
        if lay != self.lay:
            self.clear(columns=True)
            self.add_column(lay.header(), key="contributor")
            self.lay = lay
        else:
            self.clear()
        rows = view.to_dicts()
        self.ids = [r["contributor_id"] for r in rows]
        self.add_rows([(cells(r, lay, self.runs),) for r in rows])
        # add_rows gives generated keys; map positions to contributor ids ourselves
        if self.ids:
            self.move_cursor(row=self.ids.index(keep) if keep in self.ids else 0)

    def action_scroll_column(self, step: int) -> None:
        """Scroll sideways to the start of the next (step 1) or previous (-1) column."""
        if self.lay is None:
            return
        starts, x = [], 0
        for _, w, _ in self.lay.columns:
            starts.append(x)
            x += w + 1
        now = round(self.scroll_x)
        to = (
            next((a for a in starts if a > now), self.max_scroll_x)
            if step > 0
            else max((a for a in starts if a < now), default=0)
        )
        self.scroll_to(x=min(to, self.max_scroll_x), animate=False)

    def on_resize(self, event: events.Resize) -> None:
        # the columns follow the width: lay the rows out again when it changes
        if self.view is not None and self._layout() != self.lay:
            self.populate(self.view, keep=self.current())

    def current(self) -> str | None:
        return (
            self.ids[self.cursor_row] if self.ids and 0 <= self.cursor_row < len(self.ids) else None
        )
