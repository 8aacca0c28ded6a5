"""Verdict panel: mean cycle time base → head, the change with its CI, and what to distrust.

Stage: presentation. Input: a `Comparison`; output: a few lines of Rich text.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from tracediff.engine.result import Comparison
from tracediff.engine.split import change_split
from tracediff.report.text import safe
from tracediff.report.verdict import MOVED, verdict_words

MAX_WARNING_LINES = 2


def verdict_text(c: Comparison) -> Text:
    b, h = c.base, c.head
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("base ", "#8a8a8a")
    t.append(f"{b.mean_ms:.3f} ms", "bold")
    t.append(" → head ", "#8a8a8a")
    t.append(f"{h.mean_ms:.3f} ms", "bold")
    word = "cycle" if b.cycles == h.cycles == 1 else "cycles"
    t.append(f" per cycle · {b.cycles} vs {h.cycles} {word}", "#8a8a8a")
    if c.critical_device is not None:
        t.append(f" · critical GPU {c.critical_device}")
    t.append(f" · {safe(b.label)} vs {safe(h.label)} ({safe(b.cycle_method)})\n", "#8a8a8a")
    v = verdict_words(c)  # the words are the report's (tracediff.report.verdict); styled here
    t.append("change ")
    t.append(
        f"{v.change} ms ({v.pct})",
        ("bold #ff5f5f" if v.worse else "bold #5fd787") if v.state == "significant" else "bold",
    )
    t.append(f" CI {v.ci} ")
    if v.state == "significant":
        t.append(f" {v.significance.upper()} ", "bold reverse")
        split = change_split(c.attribution)
        if split is not None and split.moved is not None:  # the report's words for what moved
            t.append(f" {MOVED[split.moved]}", "bold")
    else:
        t.append(v.significance, "italic")
    t.append(f" · noise {v.noise_floor} ms", "#8a8a8a")
    notes = [f"environment differs: {d.key}: {d.base!r} → {d.head!r}" for d in c.env_diffs] + list(
        c.warnings
    )
    for line in notes[:MAX_WARNING_LINES]:
        t.append("\n⚠ ", "bold #ffaf00")
        t.append(safe(line), "#ffaf00")
    if len(notes) > MAX_WARNING_LINES:
        t.append(f"\n⚠ {len(notes) - MAX_WARNING_LINES} more warnings: press w", "bold #ffaf00")
    return t


class Verdict(Static):
    """The first thing on screen: did it get slower, by how much, can we believe it."""

    def __init__(self, comparison: Comparison, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(verdict_text(comparison), id=id)
