"""The timeline's view model: one cycle of both sides, one lane per GPU (per stream where several),
as rows of cell codes, for the GPUs on screen only.

Stage: presentation (no textual here, so it is testable and timeable on its own). Input: a
`Comparison` and an `EventCache` (tui/eventcache.py: the events of a GPU and block of cycles,
fetched when first shown); output: `TimelineRows`, per-column cell codes (model.py's codes) with
cross-stream event edge marks (`edges.py`). Nothing loops over events in Python: a lane is built
by bucketing event [start, end) intervals into terminal columns with `np.bincount` + `cumsum`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison
from tracediff.runs import schema
from tracediff.tui.edges import EdgeIndex, EdgeMarks, mark_grid
from tracediff.tui.eventcache import EventCache
from tracediff.tui.model import (
    CHANGED,
    IDLE,
    KIND_CODE,
    LAYERS,
    OTHER,
    OUT,
    RANK,
    SELECTED,
    SIDES,
)


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
    """One cycle of both sides at a time, for the GPUs on screen (`shown`), read through an
    `EventCache` (tui/eventcache.py): only the shown GPUs' events of the cycles shown are
    fetched, a block of cycles at a time, and kept. A side-cycle's numeric columns are built
    once from them, so a redraw costs O(events in the cycle on those GPUs).

    `load(cycle)` fetches (run it in a worker: for a run set it reads files again); `loaded`
    says whether a cycle can be drawn without fetching. Lanes: one per GPU, or per stream where
    a GPU has several (streams known from the replay's ops, else from the events fetched).
    """

    def __init__(
        self,
        c: Comparison,
        edges: bool = True,
        cache: EventCache | None = None,
        shown: list[int] | None = None,
        cycle: int | None = None,
    ) -> None:
        """`edges=False`: no cross-stream event edges yet; the app finds them in a second worker
        (`EdgeIndex(c, model.lane_ids)`, then `edges` is set) so the bars are not held up.
        `shown`: the GPUs drawn (default all); `cycle`: the one fetched first (default the
        first)."""
        self.c = c
        self.cache = cache or EventCache(c)
        self.devices = sorted({int(d) for d in c.cycles["device_id"].drop_nulls().to_list()})
        self.streams: dict[int, set[int]] = {}
        ops = c.replay_inputs.ops
        if isinstance(ops, pl.DataFrame) and ops.height and "stream_id" in ops.columns:
            for d, s in ops.select("device_id", "stream_id").unique().drop_nulls().iter_rows():
                self.streams.setdefault(int(d), set()).add(int(s))
        self.codes_of = {cid: i for i, cid in enumerate(c.attribution["contributor_id"].to_list())}
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
        self.shown = list(self.devices if shown is None else shown)
        self._stale = False
        first = cycle if cycle is not None else (self.cycle_ids[0] if self.cycle_ids else None)
        if first is not None:
            self.load(first)
        # every lane known now, numbered: the event edges' index (replay ops: all streams known)
        pairs = sorted((d, s) for d, ss in self.streams.items() for s in ss)
        self.lane_ids = (
            pl.DataFrame(
                {"device_id": [d for d, _ in pairs], "stream_id": [s for _, s in pairs]},
                schema={"device_id": pl.Int32, "stream_id": pl.Int64},
            )
            .with_row_index("_lane")
            .with_columns(pl.col("_lane").cast(pl.Int32))
        )
        self.version = 0
        self._relane()
        self.edges = EdgeIndex(c, self.lane_ids if edges else None)

    # --- which GPUs, which lanes -------------------------------------------------------------
    def lanes_of(self, devices: list[int]) -> list[Lane]:
        out = []
        for d in devices:
            ss = sorted(self.streams.get(d, ()))
            if len(ss) > 1:
                out += [Lane(d, s, f"G{d} s{s}") for s in ss]
            else:
                out.append(Lane(d, None, f"GPU {d}"))
        return out

    def lanes_per_gpu(self, device: int) -> int:
        """Lanes GPU `device` takes (1 until its streams are known)."""
        return max(1, len(self.streams.get(device, ())))

    def show_devices(self, devices: list[int]) -> bool:
        """Draw these GPUs from now on; True if that changed anything."""
        if devices == self.shown:
            return False
        self.shown = list(devices)
        self._relane()
        return True

    def _relane(self) -> None:
        lanes = self.lanes_of(self.shown)
        ids = [(ln.device_id, s, i) for i, ln in enumerate(lanes)
               for s in (sorted(self.streams.get(ln.device_id, ())) if ln.stream_id is None
                         else [ln.stream_id])]  # fmt: skip
        self._shown_ids = pl.DataFrame(
            {
                "device_id": [d for d, _, _ in ids],
                "stream_id": [s for _, s, _ in ids],
                "_lane": [i for _, _, i in ids],
            },
            schema={"device_id": pl.Int32, "stream_id": pl.Int64, "_lane": pl.Int32},
        )
        local = {(d, s): i for d, s, i in ids}
        every = self.lane_ids.select("device_id", "stream_id").iter_rows()
        self._g2l = np.array([local.get((d, s), -1) for d, s in every], dtype=np.int64)
        self._arrays: dict[tuple[str, int, bool], dict[str, np.ndarray]] = {}
        self._warps: dict[int, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
        self._lanes = lanes
        self._stale = False
        self.version += 1  # what the widget's render cache keys on

    @property
    def lanes(self) -> list[Lane]:
        """The shown GPUs' lanes, in GPU then stream order."""
        if self._stale:  # streams found by a fetch in a worker: relaned where they are drawn
            self._relane()
        return self._lanes

    # --- fetching ----------------------------------------------------------------------------
    def loaded(self, cycle: int) -> bool:
        """Whether `cycle` of the shown GPUs is fetched (drawing it reads no file)."""
        return all(self.cache.has(s, d, cycle, cycle + 1) for s in SIDES for d in self.shown)

    def load(self, cycle: int) -> bool:
        """Fetch `cycle`'s block of the shown GPUs (a worker's job: it may read files). True if
        it found a stream not seen before: the lanes change (and the timeline's height)."""
        grown = False
        for s in SIDES:
            for d in self.shown:
                grown |= self._learn(self.cache.get(s, d, cycle, cycle + 1))
        self._stale |= grown
        return grown

    def _learn(self, ev: pl.DataFrame) -> bool:
        """Add the streams of `ev`; True if one was new."""
        new = False
        pairs = ev.select("device_id", "stream_id").unique().drop_nulls()
        for d, s in pairs.iter_rows():
            known = self.streams.setdefault(int(d), set())
            if int(s) not in known:
                known.add(int(s))
                new = True
        return new

    def cycle_events(self, side: str, cycle: int) -> pl.DataFrame:
        """The shown GPUs' events of one side-cycle (fetched if they are not yet)."""
        parts = [self.cache.get(side, d, cycle, cycle + 1) for d in self.shown]
        if not parts:
            return schema.empty_frame("events")
        return pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]

    def full_span(self, cycle: int) -> int:
        return max([self.span.get((s, cycle), 0) for s in SIDES] + [1])

    def warp(self, cycle: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        if cycle not in self._warps:
            self._warps = {
                cycle: warp_map(self.cycle_events("base", cycle), self.cycle_events("head", cycle))
            }
        return self._warps[cycle]

    def arrays(self, side: str, cycle: int, align: bool) -> dict[str, np.ndarray]:
        """Numeric columns of one side-cycle of the shown GPUs (head times warped onto base when
        `align`), cached: zoom, pan and a new selection redraw the same cycle from these."""
        key = (side, cycle, align)
        if self._stale:
            self._relane()
        if key not in self._arrays:
            ev = self.cycle_events(side, cycle)
            if self._learn(ev):  # drawn without `load` first (a headless caller)
                self._relane()
            num = ev.join(
                self._shown_ids,
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
        if self._stale:
            self._relane()
        sel = self.codes_of.get(selected, -2) if selected else -2
        codes = {side: self._rows(side, cycle, t0, t1, width, sel, align) for side in SIDES}
        span = {s: self.span.get((s, cycle)) for s in SIDES}
        rows = TimelineRows(self.lanes, codes, t0, t1, span)
        if edges and self.edges.total:
            rows.marks, rows.waited = {}, {}
            for side in SIDES:
                warp = self.warp(cycle) if align and side == "head" else None
                e = self._on_screen(self.edges.place(side, cycle, t0, t1, width, warp))
                rows.marks[side] = mark_grid(e, len(self.lanes), width) if e.index.size else None
                rows.waited[side] = e.cycle_waited
        return rows

    def _on_screen(self, e: EdgeMarks) -> EdgeMarks:
        """Edge marks on the shown lanes (the index numbers every lane of every GPU); an end on a
        GPU not shown is not drawn."""
        src = self._g2l[e.src_lane] if e.src_lane.size else e.src_lane
        dst = self._g2l[e.dst_lane] if e.dst_lane.size else e.dst_lane
        return replace(
            e,
            src_lane=np.maximum(src, 0),
            dst_lane=np.maximum(dst, 0),
            src_col=np.where(src >= 0, e.src_col, -1),
            dst_col=np.where(dst >= 0, e.dst_col, -1),
        )

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
        if a["_lane"].size and a["_lane"].min() < 0:  # a stream without a lane: not drawn
            keep = a["_lane"] >= 0
            a = {k: v[keep] for k, v in a.items()}
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
        layer = RANK[a["kind"]].astype(np.int64) * (nl * stride)
        parts0, parts1 = [layer + cell + c0], [layer + cell + c1]
        for rank, m in (
            (RANK[CHANGED], a["_changed"]),
            (RANK[SELECTED], a["contributor_id"] == sel),
        ):
            if m.any():
                off = rank * nl * stride + cell[m]
                parts0.append(off + c0[m])
                parts1.append(off + c1[m])
        size = len(LAYERS) * nl * stride
        diff = np.bincount(np.concatenate(parts0), minlength=size) - np.bincount(
            np.concatenate(parts1), minlength=size
        )
        covered = diff.reshape(len(LAYERS), nl, stride).cumsum(axis=2)[:, :, :width] > 0
        top = len(LAYERS) - 1 - np.argmax(covered[::-1], axis=0)  # highest covered layer
        any_ = covered.any(axis=0)
        out[any_] = np.asarray(LAYERS, dtype=np.uint8)[top[any_]]
        return out


def gpus_on_screen(
    every: list[int], gpu: int | str | None, rows: int, lanes: Callable[[int], int]
) -> list[int]:
    """The GPUs the timeline shows: the GPU filter's (`gpu` an id), else the first of `every`
    whose lanes (`lanes(gpu)` each) fit in `rows` lanes, at least one: what was visible when
    every GPU was drawn and the lanes below the timeline's height were cut off."""
    if isinstance(gpu, int):
        return [gpu]
    out: list[int] = []
    used = 0
    for d in every:
        if out and used + lanes(d) > rows:
            break
        out.append(d)
        used += lanes(d)
    return out


def warp_map(base: pl.DataFrame, head: pl.DataFrame) -> dict[int, tuple[np.ndarray, np.ndarray]]:
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
