"""Drill-down screen: one contributor's instances in both runs.

Stage: presentation. Input: `model.Drill` (computed in a worker: it filters all events);
output: per-instance durations (sparkline + shared-bin histogram), instances per cycle, and the
launch configurations (grid/block) of each side with the ones that changed marked.
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Static

from tracediff.report.text import safe
from tracediff.tui import model as m

SPARK_W = 56
EDGES_W, BAR_W, SIDE_W = 20, 12, 20
HIST_W = EDGES_W + 2 * SIDE_W - 2
"""A histogram row's width: its bins, then each side's bar and count (58 < 68, the text's
width at 80x24)."""


def _stats(v: np.ndarray) -> str:
    if v.size == 0:
        return "no instances"
    p50, p90 = np.percentile(v, [50, 90])
    return (
        f"n={v.size}  mean {v.mean():.2f}  p50 {p50:.2f}  p90 {p90:.2f}  "
        f"min {v.min():.2f}  max {v.max():.2f} µs"
    )


def drill_text(d: m.Drill) -> Text:
    r = d.row
    t = Text()
    t.append(f"{safe(r['name'])}\n", "bold")
    dev = "all" if r["device_id"] is None else r["device_id"]
    phase = r.get("phase") or "-"
    t.append(safe(f"{r['kind']} · GPU {dev} · phase {phase} · {r['status']}") + "\n")
    t.append(
        f"per cycle: base {r['base_ms_per_cycle']:.4f} ms → head {r['head_ms_per_cycle']:.4f} ms, "
        f"change {r['delta_ms_per_cycle']:+.4f} ms  "
        f"CI [{r['ci95_low']:+.4f}, {r['ci95_high']:+.4f}]"
        f"{'  significant' if r['significant'] else ''}\n"
    )
    durs = d.durations
    t.append("\nInstance durations (µs), in time order\n", "bold underline")
    if not any(v.size for v in durs.values()):
        t.append("none: a gap is idle time between operations, not an operation\n", "italic")
    else:
        allv = np.concatenate([v for v in durs.values() if v.size])
        lo, hi = float(allv.min()), float(allv.max())
        for s in m.SIDES:
            t.append(f"{s:<5} ")
            t.append(m.spark(durs[s], SPARK_W, lo, hi), "#5f87d7" if s == "base" else "#d7af5f")
            t.append(f"\n      {_stats(durs[s])}\n")
        edges, counts = m.histogram(durs)
        peak = max(int(c.max()) for c in counts.values()) or 1
        # HIST_W columns a row (the drill-down's text is 68 wide at 80x24): bins, then each
        # side's bar and count, so a count never wraps onto the next line
        t.append("histogram, shared bins (µs)\n" + " " * EDGES_W, "#8a8a8a")
        t.append("base".ljust(SIDE_W) + "head\n", "#8a8a8a")
        for i in range(len(edges) - 1):
            t.append(f"{edges[i]:>9.2f}–{edges[i + 1]:<9.2f} ".ljust(EDGES_W))
            for s in m.SIDES:
                n = int(counts[s][i])
                bar = "█" * round(BAR_W * n / peak)
                t.append(f"{bar:<{BAR_W}}", "#5f87d7" if s == "base" else "#d7af5f")
                t.append(
                    f"{n:>{SIDE_W - BAR_W - 2}}  " if s == "base" else f"{n:>{SIDE_W - BAR_W - 2}}"
                )
            t.append("\n")
    t.append("\nInstances per cycle\n", "bold underline")
    pc = d.per_cycle
    for s in m.SIDES:
        side = pc.filter(pc["side"] == s)
        if side["n"].null_count() == side.height:
            ms = side["ns"].to_numpy() / 1e6
            t.append(
                f"{s:<5} GPU idle ms/cycle, all causes  {m.spark(ms, SPARK_W // 2)}  "
                f"({ms.min() if ms.size else 0:.3f}–{ms.max() if ms.size else 0:.3f})\n"
            )
            continue
        cnt = side["n"].to_numpy()
        t.append(
            f"{s:<5} {m.spark(cnt, SPARK_W, 0, None)}  "
            f"{cnt.mean() if cnt.size else 0:.2f}/cycle "
            f"(min {cnt.min() if cnt.size else 0}, max {cnt.max() if cnt.size else 0})\n"
        )
    t.append("\nLaunch configuration (grid / block): instances\n", "bold underline")
    if d.launch.height == 0:
        t.append(
            "none recorded (copies, memsets and gaps have no launch configuration)\n", "italic"
        )
    else:
        changed = (d.launch["base_n"] == 0) | (d.launch["head_n"] == 0)
        if changed.any():
            t.append("launch configuration changed between runs\n", "bold #ff5f5f")
        for row, ch in zip(d.launch.iter_rows(named=True), changed.to_list(), strict=True):
            t.append(
                f"  grid {row['grid'] or '-':<14} block {row['block'] or '-':<12} "
                f"base {row['base_n']:>7}  head {row['head_n']:>7}",
                "#ff5f5f" if ch else "",
            )
            t.append(
                "  ← only in " + ("head" if row["base_n"] == 0 else "base") + "\n" if ch else "\n"
            )
    return t


class DrillScreen(ModalScreen[None]):
    """What one contributor did in every instance; escape goes back."""

    BINDINGS = [Binding("escape,q,enter", "dismiss_dialog", "Back")]

    def __init__(self, contributor_id: str, name: str) -> None:
        super().__init__()
        self.contributor_id, self.contributor_name = contributor_id, name
        self.drill: m.Drill | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog") as v:
            v.border_title = f"drill-down {self.contributor_id}"
            with VerticalScroll():
                yield Static(
                    Text(f"{safe(self.contributor_name)}\n\ncollecting instances…"),
                    id="drill-body",
                )
        yield Footer()

    def set_drill(self, d: m.Drill) -> None:
        self.drill = d
        self.query_one("#drill-body", Static).update(drill_text(d))

    def action_dismiss_dialog(self) -> None:
        self.dismiss(None)
