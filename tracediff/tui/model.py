"""Headless view model of the TUI: everything the widgets draw, computed with polars/numpy.

Stage: presentation (no textual here, so it is testable and timeable on its own). Input: a
`Comparison`; output: filtered/sorted attribution frames (and a contributor's per-GPU split),
per-column timeline cell codes with cross-stream event edge marks (`edges.py`), sparkline strings
and drill-down statistics. Nothing loops over events in Python: a timeline row is built by
bucketing event [start, end) intervals into terminal columns with `np.bincount` + `cumsum`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison
from tracediff.tui.edges import EdgeIndex, mark_grid

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
_LAYERS = (OTHER, KERNEL, MEMSET, MEMCPY, COLLECTIVE, CHANGED, SELECTED)
_RANK = np.zeros(max(_LAYERS) + 1, dtype=np.int64)
_RANK[list(_LAYERS)] = np.arange(len(_LAYERS))

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


@dataclass(frozen=True)
class Lane:
    device_id: int
    stream_id: int | None  # None: all streams of a GPU that has only one
    label: str


@dataclass
class TimelineRows:
    """What the timeline draws for one cycle: one row of cell codes per (lane, side)."""

    lanes: list[Lane]
    codes: dict[str, np.ndarray]  # side -> (lanes, width) uint8
    t0_ns: int
    t1_ns: int
    span_ns: dict[str, int | None]  # side -> critical span of this cycle (None: side lacks it)
    # cross-stream event edges (side -> None when none is in the window): edges.mark_grid's
    # (lanes, width) grid of mark ids and, per edge of the side-cycle, whether its target waited
    marks: dict[str, np.ndarray | None] | None = None
    waited: dict[str, np.ndarray] | None = None


class TimelineModel:
    """Per-cycle access to `Comparison.events` without scanning it: row ranges per (side, cycle).

    Building it (run it in a worker) is one pass over the events: row ranges per (side, cycle),
    and the string columns the timeline needs turned into small integer codes. Afterwards a cycle
    is a zero-copy `slice` of numeric columns, so a redraw costs O(events in the cycle).
    """

    def __init__(self, c: Comparison, edges: bool = True) -> None:
        """`edges=False`: no cross-stream event edges yet; the app finds them in a second worker
        (`EdgeIndex(c, model.lane_ids)`, then `edges` is set) so the bars are not held up."""
        self.c = c
        ev = c.events
        idx = _row_ranges(ev)
        if idx.height and not (idx["hi"] - idx["lo"] + 1 == idx["n"]).all():
            # the contract says events are sorted by side, cycle; stay correct if a producer is not
            ev = ev.sort("side", "cycle", "device_id", "rel_start_ns")
            idx = _row_ranges(ev)
        self.events = ev
        self.rows = {
            (s, int(cy)): (int(lo), int(n))
            for s, cy, lo, n in idx.select("side", "cycle", "lo", "n").iter_rows()
        }
        lanes = ev.select("device_id", "stream_id").unique().sort("device_id", "stream_id")
        multi = set(
            lanes.group_by("device_id").len().filter(pl.col("len") > 1)["device_id"].to_list()
        )
        # one lane per GPU, or per stream where a GPU has several
        self.lanes = [
            Lane(int(d), int(s), f"G{d} s{s}") if d in multi else Lane(int(d), None, f"GPU {d}")
            for d, s in lanes.iter_rows()
        ]
        lane_ids = lanes.with_row_index("_lane").with_columns(pl.col("_lane").cast(pl.Int32))
        self.lane_ids = lane_ids
        self.edges = EdgeIndex(c, lane_ids if edges else None)
        self.codes_of = {cid: i for i, cid in enumerate(c.attribution["contributor_id"].to_list())}
        self.num = ev.join(
            lane_ids,
            on=["device_id", "stream_id"],
            how="left",
            maintain_order="left",
            nulls_equal=True,
        ).select(
            pl.col("_lane").fill_null(-1),
            pl.col("device_id"),
            pl.col("rel_start_ns").cast(pl.Float64),
            pl.col("rel_end_ns").cast(pl.Float64),
            pl.col("kind").replace_strict(KIND_CODE, default=OTHER, return_dtype=pl.UInt8),
            pl.col("status").is_in(["added", "removed"]).fill_null(False).alias("_changed"),
            pl.col("contributor_id")
            .replace_strict(self.codes_of, default=-1, return_dtype=pl.Int32)
            .fill_null(-1),
        )
        crit = (
            c.cycles.filter(pl.col("critical"))
            .group_by("side", "cycle")
            .agg(pl.col("span_ns").max())
        )
        # a host-only comparison's cycles are host ranges: no GPU (device_id null), so no GPU
        # span per device; a null span is a cycle the timeline has nothing to draw for
        self.span = {(s, int(cy)): int(v) for s, cy, v in crit.drop_nulls().iter_rows()}
        dev_span = c.cycles.select("side", "cycle", "device_id", "span_ns").drop_nulls()
        self.dev_span = {(s, int(cy), int(d)): int(v) for s, cy, d, v in dev_span.iter_rows()}
        self.cycle_ids = sorted({cy for _, cy in self.span})
        self._arrays: dict[tuple[str, int, bool], dict[str, np.ndarray]] = {}
        self._warps: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}

    def cycle_events(self, side: str, cycle: int) -> pl.DataFrame:
        lo, n = self.rows.get((side, cycle), (0, 0))
        return self.events.slice(lo, n)

    def full_span(self, cycle: int) -> int:
        return max([self.span.get((s, cycle), 0) for s in SIDES] + [1])

    def warp(self, cycle: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        if cycle not in self._warps:
            self._warps = {
                cycle: _warp(self.cycle_events("base", cycle), self.cycle_events("head", cycle))
            }
        return self._warps[cycle]

    def arrays(self, side: str, cycle: int, align: bool) -> dict[str, np.ndarray]:
        """Numeric columns of one side-cycle (head times warped onto base when `align`), cached:
        zoom, pan and a new selection redraw the same cycle from these."""
        key = (side, cycle, align)
        if key not in self._arrays:
            lo, n = self.rows.get((side, cycle), (0, 0))
            num = self.num.slice(lo, n)
            a = {col: num[col].to_numpy() for col in num.columns}
            if not bool(num["rel_start_ns"].is_sorted()):
                # by start time (events come by GPU, then time): a zoomed window is then a slice
                order = np.argsort(a["rel_start_ns"], kind="stable")
                a = {k: v[order] for k, v in a.items()}
            if align and side == "head":
                start, end = a["rel_start_ns"].copy(), a["rel_end_ns"].copy()
                for d, (hx, bx) in self.warp(cycle).items():
                    m = a["device_id"] == d
                    start[m], end[m] = np.interp(start[m], hx, bx), np.interp(end[m], hx, bx)
                a["rel_start_ns"], a["rel_end_ns"] = start, end  # warp is monotone: still sorted
            dur = a["rel_end_ns"] - a["rel_start_ns"]
            a["_max_dur"] = np.array([dur.max() if dur.size else 0.0])
            if len(self._arrays) >= 8:
                self._arrays.pop(next(iter(self._arrays)))
            self._arrays[key] = a
        return self._arrays[key]

    def render(
        self,
        cycle: int,
        t0: int,
        t1: int,
        width: int,
        selected: str | None = None,
        align: bool = False,
        edges: bool = False,
    ) -> TimelineRows:
        width = max(width, 1)
        sel = self.codes_of.get(selected, -2) if selected else -2
        codes = {side: self._rows(side, cycle, t0, t1, width, sel, align) for side in SIDES}
        span = {s: self.span.get((s, cycle)) for s in SIDES}
        rows = TimelineRows(self.lanes, codes, t0, t1, span)
        if edges and self.edges.total:
            rows.marks, rows.waited = {}, {}
            for side in SIDES:
                warp = self.warp(cycle) if align and side == "head" else None
                e = self.edges.place(side, cycle, t0, t1, width, warp)
                rows.marks[side] = mark_grid(e, len(self.lanes), width) if e.index.size else None
                rows.waited[side] = e.cycle_waited
        return rows

    def _rows(
        self, side: str, cycle: int, t0: int, t1: int, width: int, sel: int, align: bool
    ) -> np.ndarray:
        nl = len(self.lanes)
        out = np.zeros((nl, width), dtype=np.uint8)
        dt = max(t1 - t0, 1) / width
        warp = self.warp(cycle) if align and side == "head" else {}
        # idle background up to each lane's GPU span end in this cycle
        for i, lane in enumerate(self.lanes):
            span = self.dev_span.get((side, cycle, lane.device_id))
            if span is not None:
                end = float(span)
                if lane.device_id in warp:
                    end = float(np.interp(end, *warp[lane.device_id]))
                out[i, : int(np.clip(np.ceil((end - t0) / dt), 0, width))] = IDLE
                out[i, : max(0, min(width, int(-t0 / dt)))] = OUT
        a = self.arrays(side, cycle, align)
        # only the ops that can reach into [t0, t1): starts are sorted, no op is longer than max_dur
        i0 = int(np.searchsorted(a["rel_start_ns"], t0 - a["_max_dur"][0], "left"))
        i1 = int(np.searchsorted(a["rel_start_ns"], t1, "right"))
        a = {k: v[i0:i1] for k, v in a.items() if k != "_max_dur"}
        if a["_lane"].size == 0:
            return out
        # one bincount pass for all layers: an event adds +1 at its first column and -1 after its
        # last in its layer's (lane, column) grid; cumsum > 0 = covered. Events outside the window
        # clip to an empty range (column 0 or the spare column `width`), so no visibility mask.
        c0 = np.floor((a["rel_start_ns"] - t0) / dt)
        c1 = np.maximum(np.ceil((a["rel_end_ns"] - t0) / dt), c0 + 1)  # an op gets >= 1 column
        c0 = np.clip(c0, 0, width).astype(np.int64)
        c1 = np.clip(c1, 0, width).astype(np.int64)
        stride = width + 1
        cell = a["_lane"].astype(np.int64) * stride
        layer = _RANK[a["kind"]].astype(np.int64) * (nl * stride)
        parts0, parts1 = [layer + cell + c0], [layer + cell + c1]
        for rank, m in (
            (_RANK[CHANGED], a["_changed"]),
            (_RANK[SELECTED], a["contributor_id"] == sel),
        ):
            if m.any():
                off = rank * nl * stride + cell[m]
                parts0.append(off + c0[m])
                parts1.append(off + c1[m])
        size = len(_LAYERS) * nl * stride
        diff = np.bincount(np.concatenate(parts0), minlength=size) - np.bincount(
            np.concatenate(parts1), minlength=size
        )
        covered = diff.reshape(len(_LAYERS), nl, stride).cumsum(axis=2)[:, :, :width] > 0
        top = len(_LAYERS) - 1 - np.argmax(covered[::-1], axis=0)  # highest covered layer
        any_ = covered.any(axis=0)
        out[any_] = np.asarray(_LAYERS, dtype=np.uint8)[top[any_]]
        return out


def _row_ranges(ev: pl.DataFrame) -> pl.DataFrame:
    """(side, cycle, lo, hi, n) per side-cycle; contiguous iff `hi - lo + 1 == n` everywhere.

    Fast path (events sorted by side, cycle as the contract says): boundaries of runs of one key,
    found with numpy in O(n); otherwise a group-by.
    """
    key = (
        ev.select((pl.col("side") == "head").cast(pl.Int64) * (1 << 40) + pl.col("cycle"))
        .to_series()
        .to_numpy()
    )
    if key.size and (np.diff(key) >= 0).all():
        lo = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        n = np.diff(np.r_[lo, key.size])
        k = key[lo]
        return pl.DataFrame(
            {
                "side": np.where(k >> 40 == 1, "head", "base"),
                "cycle": k & ((1 << 40) - 1),
                "lo": lo,
                "hi": lo + n - 1,
                "n": n,
            }
        )
    return (
        ev.select("side", "cycle")
        .with_row_index("_i")
        .group_by("side", "cycle")
        .agg(pl.col("_i").min().alias("lo"), pl.col("_i").max().alias("hi"), pl.len().alias("n"))
    )


def _warp(base: pl.DataFrame, head: pl.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per GPU, a monotone map head time -> base time through matched ops (equal `slot`).

    Drawing head through it makes every matched op start and end where its base twin does, so
    aligned ops line up and what is left (stretched idle, added ops) shows where time went.
    """
    cols = ["device_id", "slot", "rel_start_ns", "rel_end_ns"]
    b = (
        base.filter(pl.col("slot").is_not_null())
        .select(cols)
        .unique(["device_id", "slot"], keep="first")
    )
    h = (
        head.filter(pl.col("slot").is_not_null())
        .select(cols)
        .unique(["device_id", "slot"], keep="first")
    )
    j = h.join(b, on=["device_id", "slot"], suffix="_b")
    out = {}
    for (d,), g in j.partition_by("device_id", as_dict=True).items():
        hx = np.concatenate([[0], g["rel_start_ns"].to_numpy(), g["rel_end_ns"].to_numpy()]).astype(
            np.float64
        )
        bx = np.concatenate(
            [[0], g["rel_start_ns_b"].to_numpy(), g["rel_end_ns_b"].to_numpy()]
        ).astype(np.float64)
        o = np.argsort(hx, kind="stable")
        out[int(d)] = (
            hx[o],
            np.maximum.accumulate(bx[o]),
        )  # np.interp needs increasing x; keep y monotone
    return out


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


def per_cycle(c: Comparison, contributor_id: str) -> pl.DataFrame:
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
        c.events.filter(pl.col("contributor_id") == contributor_id)
        .group_by("side", "cycle")
        .agg(pl.col("duration_ns").sum().alias("ns"), pl.len().alias("n"))
    )
    return (
        cyc.select("side", "cycle")
        .join(got, on=["side", "cycle"], how="left")
        .with_columns(pl.col("ns").fill_null(0), pl.col("n").fill_null(0))
        .sort("side", "cycle")
    )


def worst_cycle(c: Comparison, contributor_id: str) -> tuple[int, float] | None:
    """The head cycle where the contributor's time is furthest from its base mean: (cycle, ms)."""
    pc = per_cycle(c, contributor_id)
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


def drill(c: Comparison, contributor_id: str) -> Drill:
    row = c.attribution.filter(pl.col("contributor_id") == contributor_id).row(0, named=True)
    ev = c.events.filter(pl.col("contributor_id") == contributor_id)
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
    return Drill(row, durs, per_cycle(c, contributor_id), launch)


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
