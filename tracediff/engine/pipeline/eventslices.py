"""Events of one GPU over a range of cycles, built when asked for: what the TUI shows.

Stage: engine output (the lazy part of a `Comparison`: `Comparison.events_slice`). Input: a
side, a device and a cycle range [lo, hi) (cycles numbered across the side's runs, as in
`Comparison.cycles`); output: those rows of `Comparison.events`, the same rows and values the
whole table has, without building it.

Where they come from: one run a side keeps its aligned ops in memory (what-if replays them), so
a slice is a filter of them. A run set keeps only each file's reduced tables; a slice sends the
files that hold the device and cycles through the per-file stage again (engine/pipeline/reduce.py
`FileTask.only`: cut as before, but only that device's cycles aligned), on the executor the
comparison ran on: in this process, or on the Dask workers (`--scheduler`), which read the run
files themselves. A collective's wait for the last rank needs the other ranks' starts: they come
from the runs' reduced collective instances (`Reduced.coll_inst`), not from their ops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import polars as pl

from tracediff.engine import tables as tb
from tracediff.engine.cycle import align as al
from tracediff.engine.pipeline.executor import Executor
from tracediff.engine.pipeline.reduce import FileTask, Reduced
from tracediff.runs import schema

SliceFn = Callable[[str, int, int, int], pl.DataFrame]
"""(side, device_id, lo, hi) -> the rows of `Comparison.events` of that side and GPU whose cycle
is in [lo, hi), in the events table's order."""


def _starts(cycles: pl.DataFrame) -> pl.DataFrame:
    """`Comparison.cycles` as tables.events reads its cycle table (side as the ops have it)."""
    return cycles.select(
        pl.col("side").cast(al.SIDES), "cycle", "device_id", "start_ns"
    ).with_columns(pl.col("device_id").cast(pl.Int32))


def _in(side: str, device: int, lo: int, hi: int) -> pl.Expr:
    return (
        (pl.col("side") == side)
        & (pl.col("device_id") == device)
        & (pl.col("cycle") >= lo)
        & (pl.col("cycle") < hi)
    )


def from_ops(ops: pl.DataFrame, cycles: pl.DataFrame, attribution: pl.DataFrame) -> SliceFn:
    """One run a side: `ops` are both sides' aligned ops with the collective split (compare's
    kept ops, what `events` is built from)."""
    starts = _starts(cycles)

    def get(side: str, device: int, lo: int, hi: int) -> pl.DataFrame:
        return tb.events(ops.filter(_in(side, device, lo, hi)), starts, attribution)

    return get


class FileSlices:
    """Run sets' SliceFn (module doc). `done`: every file's reduced tables as the comparison used
    them; `task_of(p)`: file p's task again (its source, rule, the side's templates and
    renames)."""

    def __init__(
        self,
        done: Sequence[Reduced],
        task_of: Callable[[Reduced], FileTask],
        executor: Executor,
        cycles: pl.DataFrame,
        attribution: pl.DataFrame,
    ) -> None:
        self.done, self.task_of, self.executor = done, task_of, executor
        self.attribution = attribution
        self.starts = _starts(cycles)
        self.offsets = _offsets(done)
        self.ndev = len({d for p in done for d in p.devices})
        # the events' columns, no rows (once a slice had some)
        self.seen: pl.DataFrame | None = None

    @cached_property
    def instances(self) -> pl.DataFrame:
        """`_instances` of the files, built on the first slice with rows: a compare that shows
        no timeline (--format json) never holds a row per collective instance again."""
        return _instances(self.done, self.offsets)

    def __call__(self, side: str, device: int, lo: int, hi: int) -> pl.DataFrame:
        frames = []
        for p in self.done:
            off = self.offsets[(p.side, p.index)]
            a, b = max(lo, off), min(hi, off + p.n_cycles)
            if p.side != side or device not in p.devices or a >= b:
                continue
            task = self.task_of(p)
            task.keep_ops, task.only = True, (device, a - off, b - off)
            got = self.executor.run_one(task).ops
            if got is not None and got.height:
                frames.append(got.with_columns(pl.col("cycle") + off) if off else got)
        if not frames:  # no file holds that GPU in those cycles
            return self.seen if self.seen is not None else schema.empty_frame("events")
        ops = pl.concat(frames, how="vertical_relaxed")
        ev = tb.events(_waits(ops, self.instances, self.ndev), self.starts, self.attribution)
        if self.seen is None:
            self.seen = ev.clear()
        return ev


def _offsets(done: Sequence[Reduced]) -> dict[tuple[str, int], int]:
    """Each run's first cycle id in its side's numbering (the runs' cycles follow each other,
    in run order; a run's several files share its numbering)."""
    out: dict[tuple[str, int], int] = {}
    for side in ("base", "head"):
        off = 0
        for p in sorted((p for p in done if p.side == side), key=lambda p: p.index):
            if (side, p.index) not in out:
                out[(side, p.index)] = off
                off += p.n_cycles
    return out


def _instances(done: Sequence[Reduced], offsets: dict[tuple[str, int], int]) -> pl.DataFrame:
    """side, cycle, k, _last, _ranks: each collective instance (the k-th collective of a cycle
    on every device) with its last rank's start and how many ranks it has (each run's
    `coll_inst`, engine/pipeline/collsum.py)."""
    parts = [
        p.coll_inst.select(
            pl.lit(p.side).alias("side"), pl.col("cycle") + offsets[(p.side, p.index)], "k",
            "_last", "_ranks",
        )
        for p in done
        if p.coll_inst.height
    ]  # fmt: skip
    if not parts:
        return pl.DataFrame(schema={"side": pl.String, "cycle": pl.Int64, "k": pl.Int64})
    return (
        pl.concat(parts, how="vertical_relaxed")
        .group_by("side", "cycle", "k")
        .agg(pl.col("_last").max(), pl.col("_ranks").sum())
    )


def _waits(ops: pl.DataFrame, instances: pl.DataFrame, ndev: int) -> pl.DataFrame:
    """`ops` with wait_ns as attribute.collective_split gives it over all ranks: on >= 2 GPUs a
    collective waits for its instance's last rank to start (null: one rank, or one GPU)."""
    if ndev < 2 or instances.height == 0:
        return ops.with_columns(pl.lit(None, pl.Int64).alias("wait_ns"))
    is_coll = pl.col("kind") == "collective"
    # the k-th collective of its device's cycle, counted in cycle order as the files count it
    k = pl.when(is_coll).then(pl.int_range(pl.len()).over("side", "cycle", "device_id", is_coll))
    o = ops.with_columns(
        pl.col("side").cast(pl.String).alias("_side"), k.cast(pl.Int64).alias("_k")
    ).join(
        instances.rename({"side": "_side", "k": "_k"}),
        on=["_side", "cycle", "_k"],
        how="left",
        maintain_order="left",
    )
    wait = pl.min_horizontal(pl.col("duration_ns"), (pl.col("_last") - pl.col("start_ns")).clip(0))
    return o.with_columns(
        pl.when(is_coll & (pl.col("_ranks") >= 2)).then(wait).alias("wait_ns")
    ).drop("_side", "_k", "_last", "_ranks")
