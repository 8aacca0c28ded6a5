"""The per-file stage: one run's file read, cut into cycles, aligned and reduced to small tables.

Stage: engine (per file; engine/pipeline/join.py joins the files). Input: a `FileTask` (the file, or the
run already open in-process; its side; the cycle rule, or none for base's first run, which
finds it; the templates the driver broadcast); output: `Reduced`, whose tables grow with
cycles × devices × contributors, not with ops: per cycle and device its GPU span, per cycle ×
device × contributor its time and op count (gaps by cause too), each collective instance's start
and duration (the driver matches the k-th collective of a cycle across devices), totals per
kernel name, the launch-stack sums of `sources`, the host ranges and phases. Only these travel
from a worker (engine/pipeline/executor.py); the file's ops are dropped before the task returns, unless
`keep_ops` asks for them (one run a side: the replay and the TUI read them).

Nothing here needs another file: a run's several rank files fit the same stage, each reducing
its own devices. What needs all files of a side (which GPU finished a cycle last, the wait for
the last rank, the template choice) is the driver's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine import groupsum, sources
from tracediff.engine import tables as tb
from tracediff.engine.cycle import align as al
from tracediff.engine.cycle import correspond
from tracediff.engine.cycle import find as cycles
from tracediff.engine.cycle.period import RuleMismatch
from tracediff.engine.cycle.segmentation import CycleRule, Segmentation
from tracediff.engine.ops import gpu_ops_counted, in_device_order
from tracediff.engine.pipeline import collsum
from tracediff.engine.statistics import attribute as at
from tracediff.engine.statistics.resample import draw_ahead, tell_head
from tracediff.runs.runfile import Run

TOP_SEQUENCES = 3
"""Sequences per device a file returns whole (most frequent first), so the driver has the
final template's ops without reading a file again in all but rare cases."""


@dataclass(frozen=True)
class RunRef:
    """An open run as a worker reads it again: its run file, and what the driver made of the
    run (metadata: label, GPU identities; device ids relabelled onto base's: parse/ranks/gpus.py)."""

    path: str
    metadata: dict[str, Any]
    warnings: list[str]
    relabel: dict[int, int]


def portable(source: Run | Path | RunRef) -> Run | Path | RunRef:
    """A source another process can read: a run read from a run file as a `RunRef` (the file
    is read there, memory-mapped); a path as it is; a run parsed from a report in this process
    as the run itself (its tables travel)."""
    if isinstance(source, Run) and source.metadata.get("run_file"):
        relabel = {int(k): int(v) for k, v in source.metadata.get("device_relabel", {}).items()}
        return RunRef(
            str(source.metadata["run_file"]), dict(source.metadata), list(source.warnings), relabel
        )
    return source


def open_source(source: Run | Path | RunRef) -> Run:
    """The run of a task's source (module doc of parse/ranks/gpus.py for the relabelling)."""
    from tracediff.parse import load

    if isinstance(source, Run):
        return source
    if isinstance(source, Path):
        return load(source)
    run = load(Path(source.path))
    if source.relabel:
        from tracediff.parse.ranks.gpus import DEVICE_TABLES, relabel_table

        tables = {
            n: relabel_table(run.table(n), source.relabel) if n in DEVICE_TABLES else run.table(n)
            for n in run.tables
        }
        run = Run(tables=tables, metadata=run.metadata, checksums=run.checksums)
    run.metadata, run.warnings = dict(source.metadata), list(source.warnings)
    return run


@dataclass
class FileTask:
    """One file's work. `source`: an open run (in-process) or the path to read (a worker)."""

    side: str  # "base" | "head"
    index: int  # the run's position in its side (its cycles follow the earlier runs')
    source: Any  # Run | Path | RunRef | engine/pipeline/rankrun.py's RankRun
    rule: CycleRule | None  # None: find it (base's first run; `cycle` is --cycle)
    cycle: str | None = None
    templates: dict[int, al.DeviceTemplate] = field(default_factory=dict)
    keep_ops: bool = False
    whole: bool = False  # cut as one cycle, no questions asked (base's rule did not fit a run)
    template_of: tuple[int, int] | None = None  # (device, hash): return only that sequence
    carry: dict[tuple[int, int], str] = field(default_factory=dict)  # base: head's renames
    # (device, first cycle, end cycle): return only that device's aligned ops of those cycles of
    # the file, nothing reduced (the TUI's events of the GPUs and cycles it shows: eventslices.py)
    only: tuple[int, int, int] | None = None
    # a side's one run (base's; head's beside base's one): its cycles, once cut, are those the
    # bootstrap of `bootstrap` resamples draws over, on a thread from then on (base's start the
    # draws, head's tell its cycles: engine/statistics/resample.py `Ahead`); 0: not
    bootstrap: int = 0

    @property
    def name(self) -> str:
        return str(self.source) if isinstance(self.source, Path) else str(self.source.path)


@dataclass
class Reduced:
    """One file reduced (see the module doc). Cycles are numbered within the file."""

    side: str
    index: int
    info: Run  # the run without its tables: metadata, label, reader warnings
    dropped: int = 0  # ops that end before they start
    no_ops: bool = False  # no GPU operations (host-only runs go to engine/hostonly.py)
    mismatch: str | None = None  # base's rule did not fit: the reason
    error: tuple[str, str | None] | None = None  # the run cannot be cut: (message, hint)
    rule: CycleRule = field(default_factory=CycleRule.whole)
    seg_warnings: list[str] = field(default_factory=list)
    n_cycles: int = 0
    ranges: pl.DataFrame = field(default_factory=pl.DataFrame)
    phases: pl.DataFrame = field(default_factory=pl.DataFrame)
    devices: list[int] = field(default_factory=list)
    cyc: pl.DataFrame = field(default_factory=pl.DataFrame)
    """cycle, device_id, start_ns, end_ns, sum_ns, idle_ns: each device's span per cycle."""
    long: pl.DataFrame = field(default_factory=pl.DataFrame)
    """cycle, kind, name, phase, device_id, value_ns, count: op time per contributor (all but
    collectives, which the driver splits) and idle gaps by cause, on every device."""
    coll: pl.DataFrame = field(default_factory=pl.DataFrame)
    """cycle, device_id, k, kind, contributor, phase, name, bytes, start_ns, duration_ns: the
    k-th collective of each device's cycle; of a whole run (`reduce_file`, rankmerge.merge) only
    the rows of each cycle's critical GPU, with wait_ns (engine/pipeline/collsum.py)."""
    held: collsum.Held | None = None
    """A rank file's `coll` as the driver holds it until its run's files are back (rankmerge)."""
    coll_sums: pl.DataFrame = field(default_factory=pl.DataFrame)
    """A whole run's: every collective row summed per name, bytes, device (collsum.Summed)."""
    coll_inst: pl.DataFrame = field(default_factory=pl.DataFrame)
    """A whole run's: each collective instance's last start and rank count (collsum.Summed)."""
    totals: pl.DataFrame = field(default_factory=pl.DataFrame)
    pairs: pl.DataFrame = field(default_factory=pl.DataFrame)  # distinct (contributor, name)
    stack_sums: pl.DataFrame | None = None
    frames: pl.DataFrame = field(default_factory=pl.DataFrame)
    seq_stats: pl.DataFrame = field(default_factory=pl.DataFrame)
    tops: dict[int, list[al.DeviceTemplate]] = field(default_factory=dict)
    used: dict[int, int] = field(default_factory=dict)  # template hash aligned to, per device
    ops: pl.DataFrame | None = None  # aligned ops (keep_ops)
    template: al.DeviceTemplate | None = None  # template_of's answer
    per_cycle: pl.DataFrame = field(default_factory=pl.DataFrame)  # correspond.per_cycle
    slot_changes: pl.DataFrame = field(default_factory=pl.DataFrame)  # head: align.slot_changes
    range_counts: tuple[int, int, int] = (0, 0, 0)
    """A rank file cut at host ranges: its ops, those the ranges launched, those other threads
    launched (engine/pipeline/rankunit.py sums them over the run's files for the cut's warnings)."""


def _top(frame: pl.DataFrame) -> int:
    if frame.height == 0 or "cycle" not in frame.columns:
        return -1
    top = frame["cycle"].max()
    return int(top) if isinstance(top, int) else -1


def _cut(task: FileTask, run: Run, ops: pl.DataFrame) -> Segmentation:
    if task.whole:
        return cycles.whole(ops)
    if task.rule is None:
        return cycles.find(run, ops, task.cycle)
    try:
        return cycles.cut(run, ops, task.rule)
    except RuleMismatch:
        raise
    except AnalysisError as e:
        raise refusal(task, e) from None


def refusal(task: FileTask, e: AnalysisError) -> AnalysisError:
    """A cut's refusal as the driver says it: of a run cut by base's rule, naming the side."""
    if task.rule is None or task.whole:
        return e
    also = "" if task.side == "head" else "every run of a run set is cut the same way; "
    return AnalysisError(
        f"{task.side} {e.message}",
        f"base cycles are {task.rule.label}; {also}{e.hint or ''}".strip(),
    )


def reduce_file(task: FileTask) -> Reduced:
    """The per-file stage (module doc). Raises AnalysisError / InputError naming the file. (A
    run of several rank files not read by the driver, engine/pipeline/rankrun.py, is reduced file by
    file by engine/pipeline/rankunit.py instead: the executors send it there.)"""
    run = open_source(task.source)
    # ops not kept and no slice asked for: nothing reads their stream, graph node or grid/block
    ops, dropped = gpu_ops_counted(run, lean=not task.keep_ops and task.only is None)
    ops = in_device_order(ops)
    run.release()  # the run file's pages of the kernel table: read, no longer needed
    info = Run(tables={}, metadata=dict(run.metadata), warnings=list(run.warnings))
    out = Reduced(task.side, task.index, info, dropped=dropped)
    if ops.height == 0 and task.rule is None and not task.whole:
        out.no_ops = True
        return out
    try:
        seg = _cut(task, run, ops)
    except RuleMismatch as e:
        out.mismatch = e.message
        return out
    except AnalysisError as e:  # said by the driver, after what it checks of all runs first
        out.error = (e.message, e.hint)
        return out
    del ops
    if task.bootstrap:
        _ahead(task, seg)
    return summed(reduce_cut(task, out, run, seg))


def _ahead(task: FileTask, seg: Segmentation) -> None:
    """The cycles of a side's one run, as cut, to the bootstrap's draws (FileTask.bootstrap)."""
    n = seg.ops["cycle"].n_unique() if "cycle" in seg.ops.columns else 0
    if task.side == "head":
        tell_head(n)
    elif n >= 2:
        draw_ahead(n, task.bootstrap, 0)


def summed(out: Reduced) -> Reduced:
    """`out`, a whole run, with its collective rows summed as the join reads them
    (engine/pipeline/collsum.py)."""
    got = collsum.summed(out.coll, out.cyc)
    out.coll, out.coll_sums, out.coll_inst = got.crit, got.sums, got.inst
    return out


def reduce_cut(task: FileTask, out: Reduced, run: Run, seg: Segmentation) -> Reduced:
    """The rest of the per-file stage, once the file's ops are cut: sequences, alignment to
    the templates, the small tables (`out` gains them)."""
    if task.only is not None:
        out.ops = _only(seg, task)
        return out
    out.frames = sources.stack_frames(run)
    out.rule, out.seg_warnings = seg.rule, list(seg.warnings)
    out.n_cycles = max(_top(seg.ops), _top(seg.ranges)) + 1
    out.ranges, out.phases = seg.ranges, seg.phases
    tagged = seg.ops.with_columns(pl.lit(task.side, al.SIDES).alias("side"))
    seg.ops = seg.ops.clear()
    seqs = al.sequences(tagged)
    del tagged
    if seg.rule.kind in ("kernel-period", "range"):  # what engine/cycle/correspond.py checks
        out.per_cycle = correspond.per_cycle_of(seqs)  # (or, for ranges, warns) with
    if task.template_of is not None:
        out.template = seqs.template(*task.template_of)
        return out
    stats = seqs.stats()
    out.seq_stats = stats
    for dev, part in stats.group_by("device_id", maintain_order=True):
        hashes = part["hash"].head(TOP_SEQUENCES).to_list()
        out.tops[int(dev[0])] = [seqs.template(int(dev[0]), int(h)) for h in hashes]
    aligned, out.used = al.align_to(seqs, task.templates, task.carry)
    groups = seqs.gid, seqs.first  # aligned ops keep the sequences' cycle order and groups
    del seqs
    if task.side == "head":
        out.slot_changes = al.slot_changes(aligned)
    ops, cyc = at.per_device_cycles(aligned, groups)
    del aligned
    _reduce(out, ops, cyc)
    if task.keep_ops:
        out.ops = ops
    return out


def _only(seg: Segmentation, task: FileTask) -> pl.DataFrame:
    """`task.only`'s ops: cut with the whole file (the cycle numbers), then one device's cycles
    aligned to the broadcast templates. Each device-cycle is aligned and its gaps found on its
    own, so they come out as in the whole file's ops."""
    assert task.only is not None
    dev, lo, hi = task.only
    part = seg.ops.filter(
        (pl.col("device_id") == dev) & (pl.col("cycle") >= lo) & (pl.col("cycle") < hi)
    ).with_columns(pl.lit(task.side, al.SIDES).alias("side"))
    seg.ops = seg.ops.clear()
    aligned, _ = al.align_to(al.sequences(part), task.templates, task.carry)
    return at.per_device_cycles(aligned)[0]


def _reduce(out: Reduced, ops: pl.DataFrame, cyc: pl.DataFrame) -> None:
    """The small tables of `Reduced` from one file's aligned ops and per-device cycles."""
    out.devices = sorted(ops["device_id"].unique().to_list())
    out.cyc = cyc.select("cycle", "device_id", "start_ns", "end_ns", "sum_ns", "idle_ns")
    is_coll = pl.col("kind") == "collective"
    lazy = ops.lazy()  # the tables below: one plan each, collected once
    # grouped before any column becomes text: a string column made per op and grouped keeps
    # views into its whole buffer alive (~40 MB a run of 176 k ops, per table kept)
    plain, gaps = _sums(ops, is_coll)
    gaps = gaps.with_columns(
        pl.col("gap_cause")
        .cast(pl.String)
        .replace_strict(at.GAP_CAUSES, default="idle")
        .alias("name"),
        pl.lit("gap").alias("kind"),
    )
    # categorical (one mapping a process: rank files' are too, rankunit.py): no string a row
    text = [pl.col(c).cast(pl.Categorical) for c in ("kind", "name", "phase")]
    cols = ["cycle", "kind", "name", "phase", "device_id", "value_ns", "count"]
    long = pl.concat(
        [p.select(cols).with_columns(text) for p in (plain, gaps)], how="vertical_relaxed"
    )
    no_stacks = "stack_id" in ops.columns and ops["stack_id"].null_count() == ops.height
    if no_stacks:  # no op has a launch stack: its sums from `plain` (a row per cycle), not the ops
        out.long, out.stack_sums = pl.collect_all([long, _unstacked_sums(lazy, plain)])
    else:
        out.long, out.stack_sums = long.collect(), sources.stack_sums(ops)
    out.coll = _collectives(ops, is_coll)
    out.totals = tb.total_sums(ops)
    pairs = groupsum.group_sums(ops, ["contributor", "name"], {}, "_n")
    text = [pl.col("contributor").cast(pl.String), pl.col("name").cast(pl.String)]
    out.pairs = (
        lazy.select("contributor", "name").unique().select(text).collect()
        if pairs is None
        else pairs.select(text)
    )


def _collectives(ops: pl.DataFrame, is_coll: pl.Expr) -> pl.DataFrame:
    """The collectives of one file's ops with `k`: the k-th collective of its device's cycle (ops
    come in cycle order, per_device_cycles). Where each (device, cycle) is one run of rows (the
    ops' order), k is the row's place in its run, by numpy; else polars' window (0.12 -> ~0.03
    CPU-s a side of 600 k collectives)."""
    cols = ["kind", "contributor", "phase", "name", "bytes", "start_ns", "duration_ns"]
    coll = ops.filter(is_coll).select("cycle", "device_id", *cols)
    n = coll.height
    if n and not coll["cycle"].null_count() and not coll["device_id"].null_count():
        dev, cyc = (coll[c].to_numpy() for c in ("device_id", "cycle"))
        new = np.ones(n, bool)
        new[1:] = (dev[1:] != dev[:-1]) | (cyc[1:] != cyc[:-1])
        starts = np.flatnonzero(new)
        # each (device, cycle) a single run: its runs' keys never repeat
        keys = [dev[starts].astype(np.int64), cyc[starts].astype(np.int64)]
        if len(groupsum.distinct_rows(keys)) == len(starts):
            first = np.repeat(starts, np.diff(np.append(starts, n)))
            k = pl.Series("k", np.arange(n, dtype=np.int64) - first)
            return coll.select("cycle", "device_id").with_columns(k).hstack(coll.select(cols))
    window = pl.int_range(pl.len()).over("device_id", "cycle").cast(pl.Int64).alias("k")
    return coll.select("cycle", "device_id", window, *cols)


def _sums(ops: pl.DataFrame, is_coll: pl.Expr) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Op time per (cycle, kind, contributor as `name`, phase, device) of all but collectives,
    and idle gaps per (cycle, cause, phase, device), each with its row count: by the ops' codes
    (engine/groupsum.py: 0.093 -> 0.043 and 0.062 -> 0.034 CPU-s a side of 1.05 M ops), else
    by polars' group-by (codes too wide, null durations)."""
    plain_keys = ["cycle", "kind", "contributor", "phase", "device_id"]
    gap_keys = ["cycle", "gap_cause", "phase", "device_id"]
    n = pl.len().cast(pl.Int64).alias("count")
    is_gap = pl.col("gap_ns") > 0
    plain = groupsum.group_sums(ops, plain_keys, {"value_ns": "duration_ns"}, "count", ~is_coll)
    gaps = groupsum.group_sums(ops, gap_keys, {"value_ns": "gap_ns"}, "count", is_gap)
    lazy = ops.lazy()
    plain_sums = (
        lazy.filter(~is_coll)
        .group_by(plain_keys)
        .agg(pl.col("duration_ns").sum().alias("value_ns"), n)
        if plain is None
        else plain.lazy()
    )
    gap_sums = (
        lazy.filter(is_gap).group_by(gap_keys).agg(pl.col("gap_ns").sum().alias("value_ns"), n)
        if gaps is None
        else gaps.lazy()
    )
    return plain_sums.rename({"contributor": "name"}), gap_sums


def _unstacked_sums(lazy: pl.LazyFrame, plain: pl.LazyFrame) -> pl.LazyFrame:
    """`sources.stack_sums` of ops none of which has a stack (stack_id null): the same groups
    and sums, from `plain`'s rows per cycle and the collectives (0.054 -> ~0.01 CPU-s a side of
    954 k ops; a side without stacks still weighs against one with them, so it is not skipped)."""
    coll = lazy.filter(pl.col("kind") == "collective").select(
        "kind", pl.col("contributor").alias("name"), "phase", "device_id", "duration_ns"
    )
    rows = plain.select("kind", "name", "phase", "device_id", pl.col("value_ns").alias("_t"))
    return (
        pl.concat([rows, coll.rename({"duration_ns": "_t"})])
        .group_by("kind", "name", "phase", "device_id")
        .agg(pl.col("_t").sum())
        .select(
            pl.col("kind").cast(pl.String),
            pl.col("name").cast(pl.String),
            pl.col("phase").cast(pl.String),
            "device_id",
            pl.lit(None, pl.Int64).alias("stack_id"),
            "_t",
        )
    )
