"""The HTML page's pictures of a `Comparison`, as plotly.js figures (plain dicts, JSON-ready).

Stage: output. Input: a Comparison; output: `Figure`s whose `data` and `layout` the page hands
to `Plotly.newPlot` unchanged (the page's script draws nothing itself). Text that plotly shows
(tick labels, hover text) is HTML-escaped: plotly reads a few tags (`<br>`, `<a>`) in it, and
kernel names carry `<` and `>` (C++ templates). The timeline of a representative cycle is in
timeline.py.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.compare_json import phase_rollup
from tracediff.report.text import short

BASE_COLOR, HEAD_COLOR = "#4c78a8", "#f58518"
WORSE, BETTER, NOISE = "#d62728", "#2ca02c", "#9e9e9e"
TOP_BARS = 30
"""Contributors in the attribution bar chart (the table below holds them all)."""
TOP_HEAT = 20
"""Contributors (rows) of the per-GPU heat map."""
TOP_COLLECTIVES = 12


@dataclass(frozen=True)
class Figure:
    """One chart: `key` names its element (`fig-KEY`), `data`/`layout` are plotly's."""

    key: str
    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]
    note: str = ""  # a sentence under the chart (what it shows, what was left out)
    zoom: bool = False  # scroll-wheel zoom (the timeline)
    extra: dict[str, Any] = field(default_factory=dict)


def esc(text: object, width: int = 0) -> str:
    """Text for plotly (tick labels, hover), cut to `width` (0: whole) and HTML-escaped."""
    s = str(text)
    return html.escape(short(s, width) if width else s, quote=False)


def num(x: Any) -> float | None:
    """A float for JSON: NaN and infinities as None (plotly leaves a gap)."""
    if x is None:
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def plot_layout(title: str, **more: Any) -> dict[str, Any]:
    return {
        "title": {"text": esc(title), "x": 0.01, "xanchor": "left", "font": {"size": 14}},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 90},
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "hovermode": "closest",
        # below the plot: above it, the legend would sit under plotly's tool bar
        "legend": {"orientation": "h", "x": 0, "y": -0.28, "yanchor": "top"},
        **more,
    }


def cycle_times(c: Comparison) -> dict[str, pl.DataFrame]:
    """side -> (cycle, ms) of each cycle: the critical GPU's span (host-only: the range's wall
    time), the time the verdict is about."""
    crit = c.cycles.filter(pl.col("critical"))
    return {
        side: crit.filter(pl.col("side") == side)
        .sort("cycle")
        .select("cycle", (pl.col("span_ns") / 1e6).alias("ms"))
        for side in ("base", "head")
    }


def run_means(c: Comparison) -> Figure:
    """Each side's runs, one dot per run (its mean cycle time), and the side's mean as a line."""
    data, shapes = [], []
    for i, (side, s, color) in enumerate(
        (("base", c.base, BASE_COLOR), ("head", c.head, HEAD_COLOR))
    ):
        means = list(s.run_means_ms) or [s.mean_ms]
        labels = list(s.run_labels) or [s.label]
        n = len(means)
        xs = [i + 0.06 * (k - (n - 1) / 2) for k in range(n)]
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": f"{side} runs",
                "x": xs,
                "y": [num(m) for m in means],
                "marker": {"color": color, "size": 10, "line": {"width": 1, "color": "#333"}},
                "hovertext": [
                    f"{side} run {k + 1}: {esc(lab, 60)}<br>{m:.3f} ms/cycle"
                    for k, (lab, m) in enumerate(zip(labels, means, strict=False))
                ],
                "hoverinfo": "text",
            }
        )
        shapes.append(
            {
                "type": "line",
                "x0": i - 0.3,
                "x1": i + 0.3,
                "y0": s.mean_ms,
                "y1": s.mean_ms,
                "line": {"color": color, "width": 2, "dash": "dot"},
            }
        )
    layout = plot_layout(
        "Mean cycle time of each run",
        xaxis={
            "tickvals": [0, 1],
            "ticktext": [f"base: {esc(c.base.label, 30)}", f"head: {esc(c.head.label, 30)}"],
            "range": [-0.6, 1.6],
            "zeroline": False,
            "showgrid": False,
        },
        yaxis={"title": {"text": "ms per cycle"}, "rangemode": "tozero"},
        shapes=shapes,
        showlegend=False,
    )
    one = c.base.runs == 1 and c.head.runs == 1
    note = (
        "one run a side: the dot is the run's mean; the spread between runs is not measured"
        if one
        else "one dot per run; dotted line: the side's mean over runs"
    )
    return Figure("runs", "runs", data, layout, note)


def distribution(c: Comparison) -> Figure:
    """Each side's per-cycle times as two overlaid histograms."""
    times = cycle_times(c)
    data = [
        {
            "type": "histogram",
            "name": f"{side} ({times[side].height} cycles)",
            "x": [round(x, 4) for x in times[side]["ms"].to_list()],
            "opacity": 0.6,
            "marker": {"color": color},
            "nbinsx": 40,
        }
        for side, color in (("base", BASE_COLOR), ("head", HEAD_COLOR))
    ]
    what = "host range wall time" if not c.head.devices else "critical GPU's span"
    layout = plot_layout(
        "Per-cycle time",
        barmode="overlay",
        xaxis={"title": {"text": f"ms per cycle ({what})"}},
        yaxis={"title": {"text": "cycles"}},
    )
    return Figure("cycles", "cycles", data, layout, f"each cycle's {what}, both sides overlaid")


def bar_color(delta: float | None, significant: bool | None) -> str:
    if not significant or delta is None:
        return NOISE
    return WORSE if delta > 0 else BETTER


def _row_label(r: dict[str, Any], multi: bool) -> str:
    gpu = f" · GPU {r['device_id']}" if multi and r.get("device_id") is not None else ""
    return f"{r['contributor_id']} {esc(r['name'], 48)}{gpu}"


def _row_hover(r: dict[str, Any]) -> str:
    lo, hi = num(r["ci95_low"]), num(r["ci95_high"])
    ci = "no CI" if lo is None or hi is None else f"95% CI [{lo:+.3f}, {hi:+.3f}]"
    return (
        f"<b>{r['contributor_id']}</b> {esc(r['kind'])} · {esc(r['status'])} · "
        f"phase {esc(r['phase'], 40)}<br>{esc(r['name'], 120)}<br>"
        f"base {r['base_ms_per_cycle']:.4f} → head {r['head_ms_per_cycle']:.4f} ms/cycle<br>"
        f"change {r['delta_ms_per_cycle']:+.4f} ms/cycle, {ci}"
        + (" (significant)" if r["significant"] else "")
    )


def attribution_bars(c: Comparison) -> Figure:
    """The largest contributors (by |change|, the table's order) with their 95 % CIs."""
    rows = c.attribution.head(TOP_BARS).to_dicts()
    multi = len(c.head.devices) > 1
    deltas = [num(r["delta_ms_per_cycle"]) for r in rows]
    lo = [num(r["ci95_low"]) for r in rows]
    hi = [num(r["ci95_high"]) for r in rows]
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": "change",
            "y": [_row_label(r, multi) for r in rows],
            "x": deltas,
            "marker": {
                "color": [bar_color(d, r["significant"]) for d, r in zip(deltas, rows, strict=True)]
            },
            "error_x": {
                "type": "data",
                "symmetric": False,
                "array": [
                    None if h is None or d is None else max(h - d, 0.0)
                    for h, d in zip(hi, deltas, strict=True)
                ],
                "arrayminus": [
                    None if low is None or d is None else max(d - low, 0.0)
                    for low, d in zip(lo, deltas, strict=True)
                ],
                "color": "#333",
                "thickness": 1,
            },
            "hovertext": [_row_hover(r) for r in rows],
            "hoverinfo": "text",
            "customdata": [r["contributor_id"] for r in rows],
        }
    ]
    layout = plot_layout(
        "Change per contributor (ms per cycle, 95% CI)",
        height=max(260, 24 * len(rows) + 110),
        margin={"l": 20, "r": 20, "t": 40, "b": 40},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        xaxis={"zeroline": True, "zerolinecolor": "#444", "title": {"text": "ms per cycle"}},
        showlegend=False,
    )
    more = c.attribution.height - len(rows)
    note = (
        "red: significantly slower, green: significantly faster, grey: within noise; "
        "ids as `tracediff whatif --take ID` takes them"
        + (f"; {more} smaller contributors in the table below" if more > 0 else "")
    )
    return Figure("attribution", "attribution", data, layout, note)


def _phase_bar(name: str, phases: list[str], deltas: list[Any], color: str) -> dict[str, Any]:
    return {
        "type": "bar",
        "name": name,
        "x": [esc(p, 40) for p in phases],
        "y": [num(d) for d in deltas],
        "marker": {"color": color},
    }


def by_phase(c: Comparison) -> Figure | None:
    """The change summed per host phase: the GPU attribution's rows (GPU comparisons), and the
    host range wall time per phase (where the runs have nested ranges)."""
    gpu = c.attribution.filter(pl.col("kind") != "host")
    data = []
    if gpu.height:
        roll = phase_rollup(c)  # GPU comparisons have no host rows
        data.append(
            _phase_bar(
                "GPU time",
                roll["phase"].to_list(),
                roll["delta_ms_per_cycle"].to_list(),
                HEAD_COLOR,
            )
        )
    if c.host.height:
        host = c.host.to_dicts()
        bar = _phase_bar(
            "host wall time",
            [r["phase"] for r in host],
            [r["delta_ms_per_cycle"] for r in host],
            BASE_COLOR,
        )
        bar["error_y"] = {
            "type": "data",
            "symmetric": False,
            "array": [_above(r) for r in host],
            "arrayminus": [_below(r) for r in host],
        }
        data.append(bar)
    if not data:
        return None
    first = str(data[0]["name"])  # "GPU time" / "host wall time"
    title = "Change by phase" if len(data) > 1 else f"{first[0].upper()}{first[1:]} change by phase"
    layout = plot_layout(
        f"{title} (ms per cycle)",
        barmode="group",
        yaxis={"title": {"text": "ms per cycle"}, "zeroline": True, "zerolinecolor": "#444"},
    )
    note = (
        "host-only capture: the NVTX phases' wall time (no GPU work was recorded)"
        if not gpu.height
        else "GPU time: the attribution summed per host phase that launched it"
    )
    return Figure("phases", "phases", data, layout, note)


def _above(r: dict[str, Any]) -> float | None:
    hi, d = num(r["ci95_high"]), num(r["delta_ms_per_cycle"])
    return None if hi is None or d is None else max(hi - d, 0.0)


def _below(r: dict[str, Any]) -> float | None:
    lo, d = num(r["ci95_low"]), num(r["delta_ms_per_cycle"])
    return None if lo is None or d is None else max(d - lo, 0.0)
