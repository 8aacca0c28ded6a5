"""Attribution table: contributors to the change, with sort, kind/GPU filters and name search.

Stage: presentation. Input: a frame from `model.table_view`; output: DataTable rows keyed by
contributor_id. Arrow keys left/right are left to the app (they step cycles), so the table's own
bindings are redeclared without them.
"""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

# (header, width, right-aligned); the last column (name) takes what it needs
COLUMNS = (
    ("change ms", 9, True),
    ("95% CI", 17, False),
    ("share", 5, True),
    ("kind", 10, False),
    ("GPU", 3, True),
    ("phase", 8, False),
    ("base ms", 8, True),
    ("head ms", 8, True),
    ("status", 9, False),
    ("name", 0, False),
)
NAME_WIDTH = 60


def _fit(text: str, width: int, right: bool) -> str:
    if width == 0:
        return text if len(text) <= NAME_WIDTH else text[: NAME_WIDTH - 1] + "…"
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.rjust(width) if right else text.ljust(width)


HEADER = " ".join(_fit(h, w, r) for h, w, r in COLUMNS)


def cells(r: dict) -> Text:
    """One contributor as one pre-formatted line (one DataTable cell per row renders ~10x faster
    than ten, which keeps sort/filter redraws cheap)."""
    d = r["delta_ms_per_cycle"]
    sig = r["significant"]
    values = [
        f"{d:+.3f}{'*' if sig else ' '}",
        f"[{r['ci95_low']:+.3f},{r['ci95_high']:+.3f}]",
        "-" if r["share"] is None else f"{100 * r['share']:.0f}%",
        r["kind"],
        "Σ" if r.get("_summed") else "-" if r["device_id"] is None else str(r["device_id"]),
        r.get("phase") or "-",
        f"{r['base_ms_per_cycle']:.3f}",
        f"{r['head_ms_per_cycle']:.3f}",
        r["status"],
        r["name"],
    ]
    t = Text(no_wrap=True)
    for i, ((_, w, right), v) in enumerate(zip(COLUMNS, values, strict=True)):
        style = (("#ff5f5f" if d > 0 else "#5fd787") if sig else "") if i == 0 else ""
        t.append(_fit(v, w, right), style)
        if w:
            t.append(" ")
    return t


class AttributionTable(DataTable, inherit_bindings=False):
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
    ]

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.ids: list[str] = []

    def on_mount(self) -> None:
        self.add_column(HEADER, key="contributor")

    def populate(self, view: pl.DataFrame, keep: str | None = None) -> None:
        """Replace the rows; keep the cursor on contributor `keep` when it is still shown."""
        self.clear()
        rows = view.to_dicts()
        self.ids = [r["contributor_id"] for r in rows]
        self.add_rows([(cells(r),) for r in rows])
        # add_rows gives generated keys; map positions to contributor ids ourselves
        if self.ids:
            self.move_cursor(row=self.ids.index(keep) if keep in self.ids else 0)

    def current(self) -> str | None:
        return (
            self.ids[self.cursor_row] if self.ids and 0 <= self.cursor_row < len(self.ids) else None
        )
