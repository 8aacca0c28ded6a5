"""The HTML page's aligned timeline: one representative cycle of each side, base above head.

Stage: output. Input: a Comparison with GPU ops; output: a plotly figure (figures.py's
`Figure`) of horizontal bars, one lane per side × GPU × stream, times from the start of the
cycle's span on that GPU, ops coloured by status (matched, added in head, removed from base),
zoomable on the time axis (drag or scroll). The representative cycle of a side is the one whose
time is nearest the side's median (figures.cycle_times), so neither a warm-up nor an outlier is
drawn. Its ops come from `Comparison.events_slice` where the engine offers it (a run set's
files are not aligned again whole for one cycle), else from `Comparison.events`.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.html.figures import Figure, cycle_times, esc, plot_layout

MAX_OPS = 3000
"""Ops drawn per side (the longest kept): SVG bars beyond that slow every browser down."""
STATUS_COLORS = {"matched": "#8da0cb", "added": "#d62728", "removed": "#2ca02c"}
STATUS_NAMES = {
    "matched": "in both sides",
    "added": "added (head only)",
    "removed": "removed (base only)",
}


def representative(c: Comparison, side: str) -> tuple[int, float] | None:
    """(cycle, ms) of `side`'s cycle whose time is nearest its median; None without cycles."""
    t = cycle_times(c)[side]
    if t.height == 0:
        return None
    med = float(t["ms"].median())  # type: ignore[arg-type]
    row = t.with_columns((pl.col("ms") - med).abs().alias("off")).sort("off", "cycle").row(0)
    return int(row[0]), float(row[1])


def cycle_ops(c: Comparison, side: str, cycle: int) -> pl.DataFrame:
    """The events rows of one cycle of `side`, every GPU."""
    devices = c.base.devices if side == "base" else c.head.devices
    if c.events_slice is not None:
        parts = [c.events_slice(side, d, cycle, cycle + 1) for d in devices]
        parts = [p for p in parts if p.height]
        return pl.concat(parts) if parts else pl.DataFrame()
    ev = c.events
    return ev.filter((pl.col("side") == side) & (pl.col("cycle") == cycle))


def _lanes(ops: pl.DataFrame, side: str) -> pl.DataFrame:
    keep = ops.sort("duration_ns", descending=True).head(MAX_OPS)
    return keep.with_columns(
        pl.format("{} · GPU {} · stream {}", pl.lit(side), "device_id", "stream_id").alias("lane")
    ).sort("device_id", "stream_id", "rel_start_ns")


def _hover(r: dict[str, Any]) -> str:
    return (
        f"{esc(r['name'], 120)}<br>{r['duration_ns'] / 1e3:.1f} µs at "
        f"{r['rel_start_ns'] / 1e3:.1f} µs · {esc(r['kind'])} · {esc(r['status'])}"
        + (f" · {r['contributor_id']}" if r.get("contributor_id") else "")
    )


def _run_of(c: Comparison, side: str, cycle: int) -> str:
    """` of run 2 of 4` for a cycle of a side of several runs, else ''."""
    runs = c.cycle_runs.get(side, ())
    n = getattr(c, side).runs
    return f" of run {runs[cycle] + 1} of {n}" if n > 1 and cycle < len(runs) else ""


def timeline(c: Comparison) -> Figure | None:
    """Base's and head's representative cycles, aligned at their starts; None without GPU ops."""
    picked = {side: representative(c, side) for side in ("base", "head")}
    lanes: list[pl.DataFrame] = []
    cut = []
    for side, pick in picked.items():
        if pick is None:
            continue
        ops = cycle_ops(c, side, pick[0])
        if ops.height == 0:
            continue
        if ops.height > MAX_OPS:
            cut.append(f"{side}: the {MAX_OPS} longest of {ops.height} ops")
        lanes.append(_lanes(ops, side))
    if not lanes:
        return None
    allops = pl.concat(lanes, how="diagonal_relaxed")
    order = allops["lane"].unique(maintain_order=True).to_list()
    data = []
    for status, color in STATUS_COLORS.items():
        part = allops.filter(pl.col("status") == status)
        if part.height == 0:
            continue
        rows = part.to_dicts()
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": STATUS_NAMES[status],
                "y": part["lane"].to_list(),
                "x": [r["duration_ns"] / 1e3 for r in rows],
                "base": [r["rel_start_ns"] / 1e3 for r in rows],
                "marker": {"color": color, "line": {"width": 0}},
                "hovertext": [_hover(r) for r in rows],
                "hoverinfo": "text",
                "width": 0.7,
            }
        )
    layout = plot_layout(
        "A representative cycle of each side, aligned at its start (drag or scroll to zoom)",
        barmode="overlay",
        height=max(260, 30 * len(order) + 140),
        xaxis={"title": {"text": "µs from the cycle's start on its GPU"}, "rangemode": "tozero"},
        yaxis={
            "type": "category",
            "categoryorder": "array",
            "categoryarray": order,
            "autorange": "reversed",
            "fixedrange": True,
            "automargin": True,
        },
        margin={"l": 20, "r": 20, "t": 40, "b": 90},
        dragmode="zoom",
    )
    words = [
        f"{side} cycle {p[0]}{_run_of(c, side, p[0])} ({p[1]:.3f} ms, nearest the side's median)"
        for side, p in picked.items()
        if p is not None
    ]
    note = "; ".join(words) + (f"; drawn: {', '.join(cut)}" if cut else "")
    return Figure("timeline", "timeline", data, layout, note, zoom=True)
