"""The HTML page's per-GPU pictures: the change by GPU, the contributor × GPU heat map, and the
collectives split into wait and transfer.

Stage: output. Input: a Comparison of runs with GPU work; output: plotly figures (figures.py's
`Figure`), or None where a picture has nothing to show (one GPU, no collectives).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.report.html.figures import (
    BASE_COLOR,
    HEAD_COLOR,
    TOP_COLLECTIVES,
    TOP_HEAT,
    Figure,
    esc,
    num,
    plot_layout,
)

CRITICAL_COLOR = "#7b3294"


def gpu_label(device: int, critical: int | None) -> str:
    return f"GPU {device} (critical)" if device == critical else f"GPU {device}"


def by_gpu(c: Comparison) -> Figure | None:
    """Each GPU's mean cycle span, head - base; the critical GPU (last to finish in most head
    cycles) marked. None for one GPU."""
    devices = sorted(set(c.base.devices) | set(c.head.devices))
    if len(devices) < 2:
        return None
    means = (
        c.cycles.filter(pl.col("device_id").is_not_null())
        .group_by("side", "device_id")
        .agg((pl.col("span_ns").mean() / 1e6).alias("ms"))
    )
    ms = {(r["side"], r["device_id"]): r["ms"] for r in means.iter_rows(named=True)}
    crit = c.critical_device
    deltas = [
        None
        if ("base", d) not in ms or ("head", d) not in ms
        else ms[("head", d)] - ms[("base", d)]
        for d in devices
    ]
    data = [
        {
            "type": "bar",
            "name": "change of the GPU's mean cycle span",
            "x": [gpu_label(d, crit) for d in devices],
            "y": [num(x) for x in deltas],
            "marker": {"color": [CRITICAL_COLOR if d == crit else HEAD_COLOR for d in devices]},
            "hovertext": [
                f"{gpu_label(d, crit)}: base {ms.get(('base', d), float('nan')):.3f} → head "
                f"{ms.get(('head', d), float('nan')):.3f} ms"
                for d in devices
            ],
            "hoverinfo": "text",
        }
    ]
    layout = plot_layout(
        "Change by GPU: mean cycle span (ms)",
        xaxis={"type": "category"},
        yaxis={"zeroline": True, "zerolinecolor": "#444"},
        showlegend=False,
    )
    note = "purple: the critical GPU, which finishes last in most head cycles" + (
        f" (GPU {crit})" if crit is not None else ""
    )
    return Figure("gpus", "gpus", data, layout, note)


def _heat_keys(c: Comparison, per_gpu: pl.DataFrame) -> list[tuple[str, str, str]]:
    """(kind, name, phase) of the heat map's rows, largest summed |change| first."""
    if c.across_gpus.height:
        return [
            (r["kind"], r["name"], r["phase"])
            for r in c.across_gpus.head(TOP_HEAT).iter_rows(named=True)
        ]
    top = (
        per_gpu.group_by("kind", "name", "phase", maintain_order=True)
        .agg(pl.col("delta_ms_per_cycle").sum().abs().alias("size"))
        .sort("size", descending=True, maintain_order=True)
        .head(TOP_HEAT)
    )
    return [(r["kind"], r["name"], r["phase"]) for r in top.iter_rows(named=True)]


def heatmap(c: Comparison) -> Figure | None:
    """Contributors (rows) × GPUs (columns): each cell the change on that GPU. None for one GPU."""
    devices = sorted(set(c.base.devices) | set(c.head.devices))
    per_gpu = c.attribution.filter(pl.col("device_id").is_not_null())
    if len(devices) < 2 or per_gpu.height == 0:
        return None
    keys = _heat_keys(c, per_gpu)
    cells = {
        (r["kind"], r["name"], r["phase"], r["device_id"]): r for r in per_gpu.iter_rows(named=True)
    }
    z: list[list[float | None]] = []
    hover: list[list[str]] = []
    for kind, name, phase in keys:
        row = [cells.get((kind, name, phase, d)) for d in devices]
        z.append([None if r is None else num(r["delta_ms_per_cycle"]) for r in row])
        hover.append([_cell_hover(r, d) for r, d in zip(row, devices, strict=True)])
    crit = c.critical_device
    data: list[dict[str, Any]] = [
        {
            "type": "heatmap",
            "x": [gpu_label(d, crit) for d in devices],
            "y": [f"{esc(n, 40)} · {esc(p, 16)}" for _, n, p in keys],
            "z": z,
            "zmid": 0,
            "colorscale": "RdBu",  # plotly.js's runs blue (low) to red (high): red is slower
            "hovertext": hover,
            "hoverinfo": "text",
            "colorbar": {"title": {"text": "ms/cycle"}},
            "xgap": 1,
            "ygap": 1,
        }
    ]
    layout = plot_layout(
        "Change per contributor and GPU (ms per cycle)",
        height=max(300, 22 * len(keys) + 140),
        xaxis={"type": "category", "side": "top"},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        margin={"l": 20, "r": 20, "t": 70, "b": 20},
    )
    return Figure("heatmap", "heatmap", data, layout, "red: slower on that GPU, blue: faster")


def _cell_hover(r: dict[str, Any] | None, device: int) -> str:
    if r is None:
        return f"GPU {device}: no such op"
    return (
        f"{r['contributor_id']} on GPU {device}: {esc(r['name'], 100)}<br>"
        f"base {r['base_ms_per_cycle']:.4f} → head {r['head_ms_per_cycle']:.4f} ms/cycle "
        f"({r['delta_ms_per_cycle']:+.4f})"
    )


def _part(rows: list[dict[str, Any]], side: str, part: str) -> list[float | None]:
    """A side's wait or transfer time per collective; unsplit rows: all of it is transfer."""
    out: list[float | None] = []
    for r in rows:
        total, wait = num(r[f"{side}_ms_per_cycle"]), num(r[f"{side}_wait_ms_per_cycle"])
        if part == "wait":
            out.append(wait or 0.0)
        else:
            tr = num(r[f"{side}_transfer_ms_per_cycle"])
            out.append(tr if tr is not None else total)
    return out


def collectives(c: Comparison) -> Figure | None:
    """The largest collectives' time per cycle, each side a stacked bar of wait (for the
    slowest rank) and transfer. None without collectives."""
    coll = c.collectives
    if coll.height == 0:
        return None
    rows = coll.sort(pl.col("delta_ms_per_cycle").abs(), descending=True).head(TOP_COLLECTIVES)
    rows_d = rows.to_dicts()
    x = [
        f"{esc(r['op'], 30)} {esc(r['dtype'])} {r['bytes']} B · GPU {r['device_id']}"
        for r in rows_d
    ]
    split = any(r["head_wait_ms_per_cycle"] is not None for r in rows_d)
    data = []
    for side, color in (("base", BASE_COLOR), ("head", HEAD_COLOR)):
        wait = _part(rows_d, side, "wait")
        data.append(
            {
                "type": "bar",
                "name": f"{side} wait",
                "x": x,
                "y": wait,
                "offsetgroup": side,
                "marker": {"color": color, "opacity": 0.45, "pattern": {"shape": "/"}},
            }
        )
        data.append(
            {
                "type": "bar",
                "name": f"{side} transfer" if split else f"{side} (not split)",
                "x": x,
                "y": _part(rows_d, side, "transfer"),
                "base": wait,
                "offsetgroup": side,
                "marker": {"color": color},
            }
        )
    layout = plot_layout(
        "Collectives: wait and transfer (ms per cycle)",
        barmode="group",
        xaxis={"type": "category", "automargin": True},
        yaxis={"title": {"text": "ms per cycle"}},
    )
    note = (
        "hatched: waiting for the slowest rank; solid: the transfer itself"
        if split
        else "not split into wait and transfer (one GPU, or the clocks could not be joined)"
    )
    return Figure("collectives", "collectives", data, layout, note)
