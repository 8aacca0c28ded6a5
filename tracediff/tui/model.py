"""Headless view model of the TUI: everything the widgets draw, computed with polars/numpy.

Stage: presentation (no textual here, so it is testable and timeable on its own). Input: a
`Comparison` (its events through an `EventCache`, tui/eventcache.py: only one GPU's, the
contributor's); output: filtered/sorted attribution frames (and a contributor's per-GPU split),
the timeline's cell codes (drawn by tui/timelinemodel.py), sparkline strings and drill-down
statistics, all polars/numpy column operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison
from tracediff.runs import schema
from tracediff.tui.eventcache import EventCache

SIDES = ("base", "head")

SORTS: dict[str, tuple[pl.Expr, bool]] = {
    "|change|": (pl.col("delta_ms_per_cycle").abs(), True),
    "change ↓": (pl.col("delta_ms_per_cycle"), True),
    "change ↑": (pl.col("delta_ms_per_cycle"), False),
    "head ms": (pl.col("head_ms_per_cycle"), True),
    "base ms": (pl.col("base_ms_per_cycle"), True),
    "name": (pl.col("name").str.to_lowercase(), False),
}
"""Sort orders of the attribution table, in the order the sort key cycles through them."""

# Timeline cell codes. Higher code wins when several operations share a terminal column.
OUT, IDLE, KERNEL, MEMSET, MEMCPY, COLLECTIVE, OTHER, CHANGED, SELECTED = range(9)
KIND_CODE = {"kernel": KERNEL, "memset": MEMSET, "memcpy": MEMCPY, "collective": COLLECTIVE}
# Paint order (later layers overwrite earlier ones): rare kinds stay visible among kernels,
# added/removed ops over kinds, the selected contributor over everything.
LAYERS = (OTHER, KERNEL, MEMSET, MEMCPY, COLLECTIVE, CHANGED, SELECTED)
RANK = np.zeros(max(LAYERS) + 1, dtype=np.int64)
RANK[list(LAYERS)] = np.arange(len(LAYERS))

SPARK = "▁▂▃▄▅▆▇█"


def table_view(
    att: pl.DataFrame,
    sort: str = "|change|",
    kind: str | None = None,
    gpu: int | None = None,
    query: str = "",
) -> pl.DataFrame:
    """The attribution rows to show: filtered by kind, GPU and a case-insensitive name substring."""
    v = att
    if kind is not None:
        v = v.filter(pl.col("kind") == kind)
    if gpu is not None:
        v = v.filter(pl.col("device_id") == gpu)
    if query:
        v = v.filter(pl.col("name").str.to_lowercase().str.contains(query.lower(), literal=True))
    expr, desc = SORTS[sort]
    # contributor_id as tie-break keeps the order stable (and snapshots deterministic)
    return v.sort([expr, pl.col("contributor_id")], descending=[desc, False])


SUMMED = "Σ"
"""GPU filter value of the summed-over-GPUs view (multi-GPU comparisons)."""


def summed_rows(c: Comparison) -> tuple[pl.DataFrame, dict[str, list[str]]]:
    """Attribution summed over GPUs (Comparison.across_gpus) as table rows, and for each row's id
    the per-GPU contributor ids it sums. A row is keyed by the id of its GPU that changed most,
    so drill-down, the worst-cycle jump and the timeline highlight follow that GPU; what-if takes
    the op on every GPU."""
    a, att = c.across_gpus, c.attribution
    if a.height == 0:
        return att.clear(), {}
    keys = ["kind", "name", "phase"]
    groups = att.group_by(keys).agg(
        pl.col("contributor_id").alias("_ids"),
        pl.col("base_count_per_cycle").sum(),
        pl.col("head_count_per_cycle").sum(),
        pl.col("status").unique().sort().str.join("/").alias("status"),
        pl.col("base_runs").max(),
        pl.col("head_runs").max(),
        pl.col("consistent").all(),
        # a renamed op's two names (one pair per label: the label holds both)
        *(pl.col(n).first() for n in ("base_name", "head_name") if n in att.columns),
    )
    top = att.select(*keys, pl.col("device_id").alias("top_device_id"), "contributor_id")
    view = (
        a.join(top, on=[*keys, "top_device_id"], how="left", nulls_equal=True)
        .join(groups, on=keys, how="left", nulls_equal=True)
        .with_columns(pl.lit(None, pl.Int32).alias("device_id"))
        .select(*att.columns, "_ids")  # the attribution's own columns, in its order
        .with_columns(pl.lit(True).alias("_summed"))  # the table shows Σ for its GPU
        .filter(pl.col("contributor_id").is_not_null())
    )
    ids = dict(zip(view["contributor_id"].to_list(), view["_ids"].to_list(), strict=True))
    return view.drop("_ids"), ids


def gpu_split(
    c: Comparison, summed: pl.DataFrame, contributor_id: str
) -> tuple[pl.DataFrame, dict[str, Any] | None]:
    """How a contributor's change splits by GPU: the per-GPU attribution rows of its (kind, name,
    phase), by |change| (then GPU), and its row summed over GPUs (`summed_rows`; None if it has
    none). The per-GPU rows' base, head and change add up to the summed row's: both are means
    over the same cycles. Filters only; nothing is recomputed."""
    keys = ["kind", "name", "phase"]
    att = c.attribution
    which = att.filter(pl.col("contributor_id") == contributor_id).select(keys)
    per = att.join(which, on=keys, how="semi", nulls_equal=True).sort(
        [pl.col("delta_ms_per_cycle").abs(), pl.col("device_id")], descending=[True, False]
    )
    total = summed.join(which, on=keys, how="semi", nulls_equal=True) if summed.height else summed
    return per, total.row(0, named=True) if total.height else None


def spark(values: np.ndarray, width: int, lo: float | None = None, hi: float | None = None) -> str:
    """One-row sparkline of `values` in `width` columns (max per column when values > width)."""
    v = np.asarray(values, dtype=np.float64)
    if width <= 0 or v.size == 0:
        return ""
    if v.size > width:
        edges = np.linspace(0, v.size, width + 1).astype(np.int64)
        v = np.maximum.reduceat(np.nan_to_num(v, nan=-np.inf), edges[:-1])
        v[np.isinf(v)] = np.nan
    finite = v[np.isfinite(v)]
    if finite.size == 0:
        return " " * v.size
    lo = float(finite.min()) if lo is None else lo
    hi = float(finite.max()) if hi is None else hi
    scale = (v - lo) / (hi - lo) if hi > lo else np.full(v.shape, 0.5)
    idx = np.clip(np.nan_to_num(scale * (len(SPARK) - 1), nan=-1).round(), -1, len(SPARK) - 1)
    chars = np.array(list(SPARK) + [" "])  # index -1 -> " " (no value)
    return "".join(chars[idx.astype(np.int64)].tolist())


def column_of(i: int, n: int, width: int) -> int:
    """Terminal column that `spark` puts item i of n into."""
    return min(width - 1, i * width // n) if n > width else i


def cycle_spans(c: Comparison) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per side: (cycle ids, critical GPU span in ms) for the replay strip."""
    crit = (
        c.cycles.filter(pl.col("critical"))
        .group_by("side", "cycle")
        .agg(pl.col("span_ns").max())
        .sort("cycle")
    )
    return {
        s: (
            crit.filter(pl.col("side") == s)["cycle"].to_numpy(),
            crit.filter(pl.col("side") == s)["span_ns"].to_numpy() / 1e6,
        )
        for s in SIDES
    }


def contributor_events(
    c: Comparison, contributor_id: str, events: EventCache | None = None
) -> pl.DataFrame:
    """Every event of one contributor, both sides: its GPU's events of every cycle, from
    `events` (fetched there if not yet), filtered. A row without a GPU: every GPU's."""
    cache = events or EventCache(c)
    row = c.attribution.filter(pl.col("contributor_id") == contributor_id)
    dev = row["device_id"][0] if row.height else None
    devs = sorted({int(d) for d in c.cycles["device_id"].drop_nulls()}) if dev is None else [dev]
    parts = [cache.get(s, int(d), 0, cache.ends.get(s, 0)) for s in SIDES for d in devs]
    ev = pl.concat(parts, how="vertical_relaxed") if parts else schema.empty_frame("events")
    return ev.filter(pl.col("contributor_id") == contributor_id)


def per_cycle(c: Comparison, contributor_id: str, events: EventCache | None = None) -> pl.DataFrame:
    """The contributor's GPU time (ns) and instance count in each cycle of both sides (0: absent).

    Gap/overlap contributors have no events; for them the GPU's idle time per cycle stands in.
    """
    row = c.attribution.filter(pl.col("contributor_id") == contributor_id)
    dev = row["device_id"][0] if row.height else None
    cyc = c.cycles.filter(pl.col("critical") if dev is None else pl.col("device_id") == dev)
    cyc = cyc.group_by("side", "cycle").agg(pl.col("idle_ns").sum())
    if row.height and row["kind"][0] in ("gap", "overlap"):
        return cyc.select(
            "side", "cycle", pl.col("idle_ns").alias("ns"), pl.lit(None, pl.UInt32).alias("n")
        ).sort("side", "cycle")
    got = (
        contributor_events(c, contributor_id, events)
        .group_by("side", "cycle")
        .agg(pl.col("duration_ns").sum().alias("ns"), pl.len().alias("n"))
    )
    return (
        cyc.select("side", "cycle")
        .join(got, on=["side", "cycle"], how="left")
        .with_columns(pl.col("ns").fill_null(0), pl.col("n").fill_null(0))
        .sort("side", "cycle")
    )


def worst_cycle(
    c: Comparison, contributor_id: str, events: EventCache | None = None
) -> tuple[int, float] | None:
    """The head cycle where the contributor's time is furthest from its base mean: (cycle, ms)."""
    pc = per_cycle(c, contributor_id, events)
    b = pc.filter(pl.col("side") == "base")["ns"]
    h = pc.filter(pl.col("side") == "head")
    if h.height == 0 or b.len() == 0:
        return None
    dev = (h["ns"].cast(pl.Float64) - float(b.mean() or 0.0)).to_numpy()  # type: ignore[arg-type]
    i = int(np.argmax(np.abs(dev)))
    return int(h["cycle"][i]), float(dev[i] / 1e6)


@dataclass
class Drill:
    """Drill-down content for one contributor."""

    row: dict[str, Any]
    durations: dict[str, np.ndarray]  # side -> per-instance durations (µs), in time order
    per_cycle: pl.DataFrame  # side, cycle, ns, n
    launch: pl.DataFrame  # grid, block, base_n, head_n (only kernels have launch configurations)


def drill(c: Comparison, contributor_id: str, events: EventCache | None = None) -> Drill:
    row = c.attribution.filter(pl.col("contributor_id") == contributor_id).row(0, named=True)
    ev = contributor_events(c, contributor_id, events)
    durs = {s: ev.filter(pl.col("side") == s)["duration_ns"].to_numpy() / 1e3 for s in SIDES}
    lc = (
        ev.filter(pl.col("grid").is_not_null() | pl.col("block").is_not_null())
        .group_by("grid", "block", "side")
        .len()
    )
    launch = (
        lc.pivot("side", index=["grid", "block"], values="len")
        if lc.height
        else pl.DataFrame(schema={"grid": pl.String, "block": pl.String})
    )
    for s in SIDES:
        if s not in launch.columns:
            launch = launch.with_columns(pl.lit(0, pl.UInt32).alias(s))
    launch = launch.select(
        "grid",
        "block",
        pl.col("base").fill_null(0).alias("base_n"),
        pl.col("head").fill_null(0).alias("head_n"),
    ).sort("grid", "block")
    return Drill(row, durs, per_cycle(c, contributor_id, events), launch)


def histogram(
    durations: dict[str, np.ndarray], bins: int = 8
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Shared-bin histogram of both sides' durations: (edges, side -> counts)."""
    allv = np.concatenate([v for v in durations.values() if v.size] or [np.zeros(1)])
    lo, hi = float(np.percentile(allv, 0)), float(np.percentile(allv, 100))
    if hi <= lo:
        hi = lo + 1e-3
    edges = np.linspace(lo, hi, bins + 1)
    return edges, {s: np.histogram(np.clip(v, lo, hi), edges)[0] for s, v in durations.items()}
