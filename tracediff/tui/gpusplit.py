"""Per-GPU split screen: how one contributor's change summed over GPUs divides among the GPUs.

Stage: presentation. Input: `model.gpu_split`'s frame (the contributor's per-GPU attribution rows,
by |change|) and its summed-over-GPUs row; output: one line per GPU with the estimate columns the
attribution table shows (change, CI, share, base, head) plus the GPU's part of the summed change
and instances per cycle, then the Σ line. Enter on a GPU opens that GPU's drill-down.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Static

from tracediff.report.text import safe
from tracediff.tui.attribution import fit

# (header, width, right-aligned)
COLUMNS = (
    ("GPU", 3, True),
    ("change ms", 9, True),
    ("95% CI", 17, False),
    ("share", 5, True),
    ("base ms", 8, True),
    ("head ms", 8, True),
    ("of Σ change", 14, False),
    ("n/cycle b→h", 13, False),
    ("status", 9, False),
)
HEADER = " ".join(fit(h, w, r) for h, w, r in COLUMNS)
BAR = 8


def _part(d: float, total: float) -> tuple[str, str]:
    """The GPU's part of the summed change: a bar of |part| (full at 100 % or more) and %."""
    if total == 0:
        return " " * BAR + "     -", ""
    frac = d / total
    n = round(BAR * min(abs(frac), 1.0))
    return f"{'█' * n:<{BAR}}{100 * frac:>5.0f}%", "#ff5f5f" if d > 0 else "#5fd787"


def split_line(r: dict[str, Any], total: float | None, gpu: str | None = None) -> Text:
    """One row: per-GPU (`total` = the summed change) or the Σ line (`total` None)."""
    d, sig = r["delta_ms_per_cycle"], r["significant"]
    part, part_style = _part(d, total) if total is not None else ("", "")
    share = r["share"]
    values = [
        gpu if gpu is not None else str(r["device_id"]),
        f"{d:+.3f}{'*' if sig else ' '}",
        f"[{r['ci95_low']:+.3f},{r['ci95_high']:+.3f}]",
        "-" if share is None else f"{100 * share:.0f}%",
        f"{r['base_ms_per_cycle']:.3f}",
        f"{r['head_ms_per_cycle']:.3f}",
        part,
        f"{r['base_count_per_cycle']:.1f}→{r['head_count_per_cycle']:.1f}",
        safe(r["status"]),
    ]
    t = Text(no_wrap=True, style="bold" if total is None else "")
    for i, ((_, w, right), v) in enumerate(zip(COLUMNS, values, strict=True)):
        style = ""
        if i == 1 and sig:
            style = "#ff5f5f" if d > 0 else "#5fd787"
        elif i == 6:
            style = part_style
        t.append(fit(v, w, right), style)
        t.append(" ")
    return t


class SplitTable(DataTable[Text], inherit_bindings=False):
    """The GPU rows; enter drills down into the GPU under the cursor."""

    BINDINGS = [
        Binding("enter", "screen.drill", "Drill down", tooltip="this GPU's instances"),
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("home", "scroll_top", "Top", show=False),
        Binding("end", "scroll_bottom", "Bottom", show=False),
        Binding("left", "scroll_left", "Left", show=False),
        Binding("right", "scroll_right", "Right", show=False),
    ]


class GpuSplitScreen(ModalScreen[None]):
    """One contributor on each GPU, biggest |change| first, and the Σ line; escape goes back."""

    BINDINGS = [Binding("escape,q", "dismiss_dialog", "Back")]

    def __init__(
        self, per_gpu: pl.DataFrame, total: dict[str, Any] | None, drill: Callable[[str], None]
    ) -> None:
        super().__init__()
        self.per_gpu, self.total, self.open_drill = per_gpu, total, drill
        self.ids: list[str] = per_gpu["contributor_id"].to_list()

    def compose(self) -> ComposeResult:
        first = self.per_gpu.row(0, named=True) if self.per_gpu.height else {}
        with Vertical(classes="dialog split") as v:
            v.border_title = safe(
                f"per GPU · {first.get('kind', '')} · {first.get('phase') or '-'}"
            )
            yield Static(Text(safe(str(first.get("name", ""))), style="bold"), id="split-name")
            yield SplitTable(id="split-table", cursor_type="row", zebra_stripes=True)
            yield Static(self._note(), id="split-note")
        yield Footer()

    def _note(self) -> Text:
        t = Text(style="#8a8a8a")
        if self.total is None:
            t.append("single GPU: nothing to split")
            return t
        t.append(
            f"on {self.per_gpu.height} GPUs. The GPUs' base, head and change add up to Σ (means "
            "over the same cycles); Σ's CI is bootstrapped over the summed cycles, so it is not the "
            "sum of theirs. Each cycle is charged to the GPU that finished last: when that GPU "
            "changes between the runs, an unchanged op shows a loss on one GPU and a gain on "
            "another that cancel in Σ."
        )
        return t

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_column(HEADER, key="gpu")
        total = self.total["delta_ms_per_cycle"] if self.total else None
        rows = [
            (split_line(r, total if total is not None else 0.0),) for r in self.per_gpu.to_dicts()
        ]
        if self.total is not None:
            rows.append((split_line(self.total, None, gpu="Σ"),))
        table.add_rows(rows)
        table.focus()

    def current(self) -> str | None:
        i = self.query_one(DataTable).cursor_row
        return self.ids[i] if 0 <= i < len(self.ids) else None  # the Σ line has no id

    def action_drill(self) -> None:
        cid = self.current()
        if cid is not None:
            self.open_drill(cid)

    def action_dismiss_dialog(self) -> None:
        self.dismiss(None)
