"""Verdict panel: mean cycle time base → head, the change with its CI, and what to distrust.

Stage: presentation. Input: a `Comparison`; output: a few lines of Rich text.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tracediff.engine.result import Comparison

MAX_WARNING_LINES = 2


def verdict_text(c: Comparison) -> Text:
    b, h = c.base, c.head
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("base ", "#8a8a8a")
    t.append(f"{b.mean_ms:.3f} ms", "bold")
    t.append(" → head ", "#8a8a8a")
    t.append(f"{h.mean_ms:.3f} ms", "bold")
    t.append(f" per cycle · {b.cycles} vs {h.cycles} cycles", "#8a8a8a")
    if c.critical_device is not None:
        t.append(f" · critical GPU {c.critical_device}")
    t.append(f" · {b.label} vs {h.label} ({b.cycle_method})\n", "#8a8a8a")
    worse = c.delta_ms_per_cycle > 0
    t.append("change ")
    t.append(
        f"{c.delta_ms_per_cycle:+.3f} ms ({c.delta_pct:+.1f} %)",
        ("bold #ff5f5f" if worse else "bold #5fd787") if c.significant else "bold",
    )
    t.append(f" CI [{c.delta_ci95[0]:+.3f}, {c.delta_ci95[1]:+.3f}] ")
    if c.significant:
        t.append(" SIGNIFICANT ", "bold reverse")
    else:
        t.append("not significant (within noise)", "italic")
    t.append(f" · noise {c.noise_floor_ms:.3f} ms", "#8a8a8a")
    notes = [f"environment differs: {d.key}: {d.base!r} → {d.head!r}" for d in c.env_diffs] + list(
        c.warnings
    )
    for line in notes[:MAX_WARNING_LINES]:
        t.append("\n⚠ ", "bold #ffaf00")
        t.append(line, "#ffaf00")
    if len(notes) > MAX_WARNING_LINES:
        t.append(f"\n⚠ {len(notes) - MAX_WARNING_LINES} more warnings: press w", "bold #ffaf00")
    return t


class Verdict(Static):
    """The first thing on screen: did it get slower, by how much, can we believe it."""

    def __init__(self, comparison: Comparison, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(verdict_text(comparison), id=id)
