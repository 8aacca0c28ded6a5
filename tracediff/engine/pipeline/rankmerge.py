"""The driver's side of a run of rank files: each file's reduced tables kept small as they come
back, then put together into the run's `Reduced`.

Stage: engine (after engine/pipeline/rankunit.py's `reduce` round, before engine/pipeline/join.py's driver join).
Input: what the driver decided for the run's cut (`Ctx`) and each file's `Reduced` as a worker
sent it; output: the run's `Reduced`, the same tables the joined run's reduction gives.

What the driver keeps of a file: the join reads a file's `long` rows (per cycle, device and
contributor) only where that device finished the cycle last in its run (engine/pipeline/join.py
`contributions`: the critical GPU, `cycles_of`'s rule: the later end, then the longer span,
then the lower device). A run's cycles are its own (engine/runsets.py numbers each run's
after the one before), so the critical device of a cycle is decided among the run's files
alone. `Leaders` follows, per cycle, the device leading among the files back so far: a row of
any other device can never become critical, and is dropped as its file comes back (rows of a
device that led and was overtaken are dropped now and then); `merge` keeps only the final
leaders' rows. Of a run of 512 rank files that keeps one GPU's rows per cycle, not 512.
The collective rows (`coll`) are held until the run's files are back (the wait for the last
rank needs every rank's start), narrow (collsum.py `Holding`: what the waits and sums read, and
the whole rows of the devices that can still lead), then summed: the join reads each cycle's
critical GPU's rows, the instances and sums per kernel name and GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine import sources
from tracediff.engine.cycle import ranges as rg
from tracediff.engine.cycle.period import display_name
from tracediff.engine.cycle.segmentation import CycleRule, no_phases, no_ranges
from tracediff.engine.pipeline.collsum import Holding, first_per_cycle, leading
from tracediff.engine.pipeline.rankrun import RankRun
from tracediff.engine.pipeline.reduce import FileTask, Reduced, refusal
from tracediff.runs.runfile import Run

KEY = ["cycle", "device_id"]
REPRUNE = 200_000
"""Kept `long` rows of a run past which (and past twice the count after the last time) the
files back so far are pruned again to the current leaders."""


@dataclass
class Ctx:
    """What the driver decided for one run's cut (merge reads it)."""

    mode: str
    rule: CycleRule | None = None
    moved: list[str] | None = None
    ranges: pl.DataFrame = field(default_factory=no_ranges)
    phases: pl.DataFrame = field(default_factory=no_phases)
    notes: list[str] = field(default_factory=list)  # the cut's own warnings (ranges.py's notes)


def on_leaders(long: pl.DataFrame, lead: pl.DataFrame) -> pl.DataFrame:
    """`long`'s rows of each cycle's leading device, in their order."""
    if long.height == 0:
        return long
    keys = lead.select(pl.col(k).cast(long.schema[k]) for k in KEY)
    return long.join(keys, on=KEY, how="semi", maintain_order="left")


class Leaders:
    """One run's files as they come back (each by its place in the run's file tasks), and the
    leading device per cycle among them so far (module doc)."""

    def __init__(self, n: int) -> None:
        self.lead: pl.DataFrame | None = None
        self.parts: list[Any] = [None] * n
        self.rows = 0
        self.floor = REPRUNE
        self.coll = Holding()

    def arrived(self, i: int, part: Any) -> Any:
        """File task i's result as it comes back, kept; a reduced file has its collective rows
        held (module doc) and, with cycles, its `long` and wide collective rows of devices that
        cannot lead dropped."""
        self.parts[i] = part
        if not isinstance(part, Reduced):
            return part
        if part.cyc.height:
            mine = leading(part.cyc)
            self.lead = mine if self.lead is None else first_per_cycle(pl.concat([self.lead, mine]))
            part.long = on_leaders(part.long, self.lead)
        part.held = self.coll.held(part.coll, self._keep)
        part.coll = part.coll.clear()
        self.rows += part.long.height + part.held.wide.height
        if self.rows > 2 * self.floor:
            back = [(p, p.held) for p in self.parts if isinstance(p, Reduced) and p.held]
            for p, h in back:
                p.long, h.wide = self._keep(p.long), self._keep(h.wide)
            self.rows = sum(p.long.height + h.wide.height for p, h in back)
            self.floor = max(self.rows, REPRUNE)
        return part

    def _keep(self, rows: pl.DataFrame) -> pl.DataFrame:
        return rows if self.lead is None else on_leaders(rows, self.lead)

    def handed(self) -> tuple[list[Any], pl.DataFrame | None, Holding]:
        """The files' results in file-task order, the final lead and the held collective rows'
        instances, for `merge`; the parts are no longer kept here (freed once merged)."""
        parts, self.parts = self.parts, []
        return parts, self.lead, self.coll


def empty(task: FileTask) -> Reduced:
    """The run's `Reduced` with no tables: its metadata and warnings."""
    rr: RankRun = task.source
    info = Run(tables={}, metadata=dict(rr.metadata), warnings=list(rr.warnings))
    return Reduced(task.side, task.index, info)


def _cat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    frames = [f for f in frames if f.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()


def merge(
    task: FileTask, ctx: Ctx, parts: list[Reduced], lead: pl.DataFrame | None, coll: Holding
) -> Reduced | None:
    """The run's `Reduced` from its files' (module doc); `lead` and `coll`: what `Leaders`
    kept once every file is back (the leading device of each cycle of their `cyc`, the held
    collective rows); None: finding kernel periods, no GPU of the run repeats (the caller cuts
    it whole)."""
    rr: RankRun = task.source
    out = empty(task)
    out.dropped = sum(p.dropped for p in parts)
    first = [min((rr.relabel.get(d, d) for d in f.ids.values()), default=1 << 30) for f in rr.files]
    order = sorted(range(len(parts)), key=lambda i: first[i])
    live = [parts[i] for i in order if not parts[i].no_ops]
    if not live:
        if task.rule is None and not task.whole:
            out.no_ops = True
        else:
            e = refusal(task, AnalysisError(
                f"{rr.path}: the run has no GPU operations",
                "profile with CUDA tracing on (nsys -t cuda,nvtx)",
            ))  # fmt: skip
            out.error = (e.message, e.hint)
        return out
    for p in live:
        if p.mismatch is not None:
            out.mismatch = p.mismatch
            return out
    for p in live:
        if p.error is not None:
            out.error = p.error
            return out
    if ctx.mode == "find":
        cuts = sorted((c for p in live for c in p.rule.cuts), key=lambda c: c.device_id)
        if not cuts:
            return None
        out.rule = CycleRule.kernel_period(tuple(cuts), display_name(cuts[0].anchor))
    else:
        assert ctx.rule is not None
        out.rule = ctx.rule
    if ctx.mode == "range":
        try:
            out.seg_warnings = rg.cut_warnings(
                out.rule, ctx.moved, sum(p.range_counts[2] for p in live),
                sum(p.range_counts[1] for p in live), sum(p.range_counts[0] for p in live),
                rr.path,
            )  # fmt: skip
        except AnalysisError as e:
            e = refusal(task, e)
            out.error = (e.message, e.hint)
            return out
    else:
        out.seg_warnings = [w for p in live for w in p.seg_warnings]
    out.seg_warnings += ctx.notes
    out.ranges, out.phases = ctx.ranges, ctx.phases
    top = int(ctx.ranges["cycle"].max()) if ctx.ranges.height else -1  # type: ignore[arg-type]
    out.n_cycles = max([p.n_cycles for p in live] + [top + 1])
    out.devices = sorted({d for p in live for d in p.devices})
    for name in ("cyc", "long", "totals", "per_cycle", "seq_stats", "slot_changes"):
        setattr(out, name, _cat([getattr(p, name) for p in live]))
    got = coll.summed([p.held for p in live if p.held is not None], out.cyc)
    out.coll, out.coll_sums, out.coll_inst = got.crit, got.sums, got.inst
    for p in live:  # freed now, not when the caller drops the parts
        p.held = None
    if lead is not None:  # only the critical GPUs' rows are read (module doc)
        out.long = on_leaders(out.long, lead)
    if out.seq_stats.height:
        out.seq_stats = out.seq_stats.sort(
            "device_id", "count", "first_cycle", descending=[False, True, False]
        )
    out.pairs = _cat([p.pairs for p in live]).unique()
    sums = [p.stack_sums for p in live if p.stack_sums is not None]
    out.stack_sums = _cat(sums) if sums else None
    out.frames = sources.frames_joined([p.frames for p in live])
    if task.keep_ops:  # the TUI's events of a run set: every file's ops (in-process only)
        kept = [p.ops for p in live if p.ops is not None and p.ops.height]
        out.ops = pl.concat(kept, how="diagonal_relaxed") if kept else None
    for p in live:
        out.tops.update(p.tops)
        out.used.update(p.used)
        if out.template is None and p.template is not None:
            out.template = p.template
    return out
