"""Verdict panel: what each side was decided to be (one line a side), what moved, the change with its CI, mean cycle time base → head.

Stage: presentation. Input: a `Comparison`; output: a few lines of Rich text, in the text
report's order and words (tracediff.report.verdict): where the runs were compared whole because
the cut could not be trusted, that reason first; then "GPU work: …" and "host-bound idle: …"
(which of the two moved, engine/result.py), the change with its CI, base → head. A run-set
comparison (a side with several runs) gets one more line: the runs per side and each run's mean
cycle time as a sparkline, both sides on one scale, so the spread between runs is seen beside
the change it is judged against.
"""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual.widgets import Static

from tracediff.engine.result import Comparison
from tracediff.report.compare_text import decided_lines
from tracediff.report.numbers import settled
from tracediff.report.text import safe
from tracediff.report.verdict import MOVED, fallback_line, split_lines, verdict_words

MAX_WARNING_LINES = 2


def verdict_text(c: Comparison) -> Text:
    b, h = c.base, c.head
    t = Text(no_wrap=True, overflow="ellipsis")
    for line in decided_lines(c):  # what tracediff decided each side is (parse/decided.py)
        t.append(safe(line) + "\n", "#8a8a8a")
    if c.cycle_fallback:  # every number below is of the whole runs: said before them
        t.append(safe(fallback_line(c.cycle_fallback)) + "\n", "bold #ffaf00")
    split = settled(c.change_split)
    if split is not None:  # the report's first two lines: GPU work, then host-bound idle
        for line, part in zip(split_lines(c, split), ("gpu_work", "host_bound_idle"), strict=True):
            head, _, rest = line.partition(": ")
            moved = split.moved in (part, "both")
            t.append(head + ":", "bold" if moved else "")
            t.append(" " + safe(rest) + "\n", "" if moved else "#8a8a8a")
    v = verdict_words(c)  # the words are the report's (tracediff.report.verdict); styled here
    t.append("change ")
    t.append(
        f"{v.change} ms ({v.pct})",
        ("bold #ff5f5f" if v.worse else "bold #5fd787") if v.state == "significant" else "bold",
    )
    t.append(f" CI {v.ci} ")
    if v.state == "significant":
        t.append(f" {v.significance.upper()} ", "bold reverse")
        if split is not None and split.moved is not None:  # the report's words for what moved
            t.append(f" {MOVED[split.moved]}", "bold")
    else:
        t.append(v.significance, "italic")
    t.append(f" · noise {v.noise_floor} ms", "#8a8a8a")
    t.append("\nbase ", "#8a8a8a")
    t.append(f"{b.mean_ms:.3f} ms", "bold")
    t.append(" → head ", "#8a8a8a")
    t.append(f"{h.mean_ms:.3f} ms", "bold")
    word = "cycle" if b.cycles == h.cycles == 1 else "cycles"
    t.append(f" per cycle · {b.cycles} vs {h.cycles} {word}", "#8a8a8a")
    if c.critical_device is not None:
        t.append(f" · critical GPU {c.critical_device}")
    t.append(f" · {safe(b.label)} vs {safe(h.label)} ({safe(b.cycle_method)})", "#8a8a8a")
    if b.runs > 1 or h.runs > 1:
        t.append("\n")
        t.append_text(runs_text(c))
    notes = [f"environment differs: {d.key}: {d.base!r} → {d.head!r}" for d in c.env_diffs] + list(
        c.warnings
    )
    for line in notes[:MAX_WARNING_LINES]:
        t.append("\n⚠ ", "bold #ffaf00")
        t.append(safe(line), "#ffaf00")
    if len(notes) > MAX_WARNING_LINES:
        t.append(f"\n⚠ {len(notes) - MAX_WARNING_LINES} more warnings: press w", "bold #ffaf00")
    return t


def runs_text(c: Comparison) -> Text:
    """`runs base 4 ▁▃█▂ 7.120–7.400 · head 4 ▅▆▇▆ … ms/cycle · …`: each run's mean cycle time,
    both sides on one scale (min to max over every run of both)."""
    from tracediff.tui.model import spark

    b, h = c.base, c.head
    every = [m for s in (b, h) for m in s.run_means_ms if np.isfinite(m)]
    lo, hi = (min(every), max(every)) if every else (None, None)
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("runs ")
    for i, (name, side) in enumerate((("base", b), ("head", h))):
        means = np.asarray(side.run_means_ms, dtype=np.float64)
        t.append(("" if i == 0 else " · ") + f"{name} {side.runs} ", "#8a8a8a")
        t.append(spark(means, means.size, lo, hi) if means.size else "-", "bold")
        if means.size:
            t.append(f" {means.min():.3f}–{means.max():.3f}", "#8a8a8a")
    t.append(" ms/cycle per run", "#8a8a8a")
    if c.noise_unit == "run":
        t.append(" · the run is the unit · ✓ moved so in every run", "#8a8a8a")
    else:
        t.append(" · under 2 runs a side: CIs over cycles", "italic")
    return t


class Verdict(Static):
    """The first thing on screen: did it get slower, by how much, can we believe it."""

    def __init__(self, comparison: Comparison, *, id: str | None = None) -> None:  # noqa: A002
        super().__init__(verdict_text(comparison), id=id)
