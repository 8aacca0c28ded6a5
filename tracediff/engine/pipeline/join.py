"""The driver's join: each side's reduced files (engine/pipeline/reduce.py) into one `Comparison`.

Stage: engine (after the per-file stage). Input: both sides' `Reduced`, in run order; output:
the `Comparison` (engine/result.py), the same one the ops of every run in one frame gave. What
needs several files is done here, on the small tables: the cycle numbering across a side's runs
(engine/runsets.py), which GPU finished each cycle last (the critical one), the contributions on
critical GPUs, the statistics, the side summaries and the tables. The wait for the last rank of
each collective instance is each run's own (its instances are its own): summed where the run was
reduced (engine/pipeline/collsum.py), the join reads the critical GPUs' rows and the sums.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine import runsets, sources
from tracediff.engine import skew as sk
from tracediff.engine import tables as tb
from tracediff.engine.cycle import align as al
from tracediff.engine.cycle.segmentation import Segmentation
from tracediff.engine.env import env_diffs
from tracediff.engine.pipeline.reduce import Reduced
from tracediff.engine.result import Comparison, EventsSlice, ReplayInputs
from tracediff.engine.statistics import attribute
from tracediff.engine.statistics import stats as st
from tracediff.engine.statistics import verdict as vd
from tracediff.runs import schema
from tracediff.runs.runfile import Run


@dataclass(frozen=True)
class CycleTimes:
    """Each cycle's time: the span of the device that finished it last (the critical one)."""

    base_ms: np.ndarray
    head_ms: np.ndarray
    base_cycles: list[int]
    head_cycles: list[int]
    critical_device: int | None  # the GPU that finishes last in most head cycles


def cycle_times(cyc: pl.DataFrame) -> CycleTimes:
    crit = cyc.filter(pl.col("critical"))
    span = {s: crit.filter(pl.col("side") == s).sort("cycle") for s in ("base", "head")}
    if span["base"].height == 0 or span["head"].height == 0:
        raise AnalysisError("no complete cycles in one of the runs", "check --cycle")
    dev = crit.filter(pl.col("side") == "head")["device_id"].mode().sort()
    return CycleTimes(
        base_ms=span["base"]["span_ns"].to_numpy() / 1e6,
        head_ms=span["head"]["span_ns"].to_numpy() / 1e6,
        base_cycles=span["base"]["cycle"].to_list(),
        head_cycles=span["head"]["cycle"].to_list(),
        critical_device=int(dev[0]) if len(dev) else None,
    )


@dataclass
class Side:
    """One side's files joined: its segmentation (host ranges, no ops), run index, offsets."""

    parts: list[Reduced]
    seg: Segmentation
    run_of: np.ndarray
    offsets: list[int]

    @property
    def infos(self) -> list[Run]:
        return [p.info for p in self.parts]


def side_of(parts: list[Reduced]) -> Side:
    seg, run_of, offsets = runsets.merge_reduced(
        [(p.ranges, p.phases, p.seg_warnings, p.n_cycles) for p in parts], parts[0].rule
    )
    return Side(parts, seg, run_of, offsets)


def _stack(side: Side, name: str, label: str) -> pl.DataFrame:
    """One table of every file of a side, cycles renumbered across its runs, with `side`."""
    frames = []
    for p, off in zip(side.parts, side.offsets, strict=True):
        f: pl.DataFrame = getattr(p, name)
        if f.height:
            frames.append(f.with_columns(pl.col("cycle") + off) if "cycle" in f.columns else f)
    if not frames:
        return pl.DataFrame()
    return pl.concat(frames, how="vertical_relaxed").with_columns(
        pl.lit(label, al.SIDES).alias("side")
    )


def cycles_of(b: Side, h: Side) -> pl.DataFrame:
    """Every device's span per cycle of both sides, with `critical`: the device that finished
    last (ties: the longer span, then the lower device), as engine/statistics/attribute.py's
    per_device_cycles says of one frame."""
    cyc = pl.concat([_stack(b, "cyc", "base"), _stack(h, "cyc", "head")], how="vertical_relaxed")
    cyc = cyc.select(
        "side",
        "cycle",
        pl.col("device_id").cast(pl.Int32),
        "start_ns",
        "end_ns",
        "sum_ns",
        "idle_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"),
    ).with_columns((pl.col("span_ns") - pl.col("idle_ns")).alias("busy_ns"))
    return (
        cyc.sort(
            "side",
            "cycle",
            "end_ns",
            "span_ns",
            "device_id",
            descending=[False, False, True, True, False],
        )
        .with_columns((pl.int_range(pl.len()).over("side", "cycle") == 0).alias("critical"))
        .sort("side", "cycle", "device_id")
    )


def contributions(long: pl.DataFrame, coll: pl.DataFrame, cyc: pl.DataFrame) -> pl.DataFrame:
    """Long table (side, cycle, kind, name, phase, device_id, value_ns, count) on critical
    devices: engine/statistics/attribute.py's contributions from the files' sums."""
    crit = cyc.filter(pl.col("critical")).select("side", "cycle", "device_id")
    key = ["side", "cycle", "kind", "name", "phase", "device_id"]
    on = ["side", "cycle", "device_id"]

    every = crit.height == cyc.height  # one GPU a cycle: every row is on its critical GPU

    def critical(f: pl.DataFrame) -> pl.DataFrame:
        f = f.with_columns(pl.col("device_id").cast(pl.Int32))
        # (the files' rows are of their cycles' GPUs: all kept, not copied by a join)
        return f if every else f.join(crit, on=on, how="semi")

    parts = [critical(long).select(*key, "value_ns", "count")] if long.height else []
    if coll.height:
        c = critical(coll)
        name = pl.col("contributor").cast(pl.String)
        grp = ["side", "cycle", "kind", "phase", "device_id"]
        n = pl.len().cast(pl.Int64).alias("count")
        plain = c.filter(pl.col("wait_ns").is_null())
        w = c.filter(pl.col("wait_ns").is_not_null())
        parts += [
            plain.group_by(*grp, name.alias("name")).agg(
                pl.col("duration_ns").sum().alias("value_ns"), n
            ),
            w.group_by(*grp, (name + " [wait for last rank]").alias("name")).agg(
                pl.col("wait_ns").sum().alias("value_ns"), n
            ),
            w.group_by(*grp, (name + " [transfer]").alias("name")).agg(
                (pl.col("duration_ns") - pl.col("wait_ns")).sum().alias("value_ns"), n
            ),
        ]
    parts.append(attribute.overlap(cyc, key))
    # categorical: a few hundred names, not a string a row (400 k rows at x500); the statistics
    # turn the distinct keys into text (statistics/stats.py)
    text = [pl.col(c).cast(pl.Categorical) for c in ("kind", "name", "phase")]
    text.append(pl.col("side").cast(pl.String))
    return pl.concat(
        [p.select(*key, "value_ns", "count").with_columns(text) for p in parts],
        how="vertical_relaxed",
    )


def warnings_of(b: Side, h: Side) -> list[str]:
    """The segmentations' and readers' warnings, each side's, then what the comparison skips."""

    def readers(runs: list[Run]) -> list[str]:
        if len(runs) == 1:
            return list(runs[0].warnings)
        return [f"run {i + 1}: {w}" for i, r in enumerate(runs) for w in r.warnings]

    warnings = [f"base: {w}" for w in b.seg.warnings + readers(b.infos)] + [
        f"head: {w}" for w in h.seg.warnings + readers(h.infos)
    ]
    dropped = {"base": sum(p.dropped for p in b.parts), "head": sum(p.dropped for p in h.parts)}
    warnings += [  # gpu_ops drops ops that end before they start
        f"{s}: {n} GPU operations end before they start or have no end time; they are not compared"
        for s, n in dropped.items()
        if n
    ]
    ndev_b, ndev_h = len(devices_of(b)), len(devices_of(h))
    if ndev_b != ndev_h:
        warnings.append(
            f"base ran on {ndev_b} GPU(s), head on {ndev_h}: per-GPU contributors are not comparable one to one"
        )
    return warnings


def devices_of(side: Side) -> list[int]:
    return sorted({d for p in side.parts for d in p.devices})


def _both(b: Side, h: Side, name: str) -> pl.DataFrame:
    """Table `name` of both sides' files, stacked (`_stack`); empty when no file has rows."""
    frames = [f for f in (_stack(b, name, "base"), _stack(h, name, "head")) if f.height]
    return pl.concat(frames, how="vertical_relaxed") if frames else pl.DataFrame()


def _stack_tables(
    parts_b: list[Reduced], parts_h: list[Reduced], attribution: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`Comparison.sources` and `.launch_stacks` from the files' launch-stack sums and frames
    (sums None: some file has no stacks)."""
    every = parts_b + parts_h
    sums = (
        None
        if any(p.stack_sums is None for p in every)
        else pl.concat(
            [p.stack_sums.with_columns(pl.lit(p.side).alias("side"))
             for p in every if p.stack_sums is not None],
            how="vertical_relaxed",
        )
    )  # fmt: skip
    frames = sources.frames_joined([p.frames for p in every])
    frames_b = sources.frames_joined([p.frames for p in parts_b])
    frames_h = sources.frames_joined([p.frames for p in parts_h])
    return (
        sources.sources(sums, attribution, frames),
        sources.launch_stacks(sums, attribution, frames_b, frames_h),
    )


def join(
    parts_b: list[Reduced],
    parts_h: list[Reduced],
    n_boot: int,
    labels: tuple[str | None, str | None],
    events: Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame],
    replay: ReplayInputs,
    say: Callable[[str], None],
    fallback: str | None = None,
    tracers: str | None = None,
    events_slice: Callable[[pl.DataFrame, pl.DataFrame], EventsSlice] | None = None,
) -> Comparison:
    """The `Comparison` of both sides' reduced files. `events(cyc, attribution)`: builds the
    events table on first read (the TUI; the ops are the files', not the driver's); `replay`:
    what-if's inputs (one run a side), or empty; `fallback`: why the runs were compared whole;
    `tracers`: the warning that the sides were recorded by different tracers;
    `events_slice(cycles, attribution)`: the comparison's `events_slice`, from its cycle and
    attribution tables (None: the readers slice `events`)."""
    b, h = side_of(parts_b), side_of(parts_h)
    runs = runsets.RunIndex(b.run_of, h.run_of, len(parts_b), len(parts_h))
    warnings = warnings_of(b, h) + vd.run_set_warnings(runs)
    if tracers:
        warnings.insert(0, tracers)
    devices = {"base": devices_of(b), "head": devices_of(h)}
    say("attributing")
    cyc = cycles_of(b, h)
    t = cycle_times(cyc)
    v = vd.verdict(t.base_ms, t.head_ms, n_boot, runs, (t.base_cycles, t.head_cycles))
    # each run's collective rows, summed where it was reduced (engine/pipeline/collsum.py)
    coll, sums = _both(b, h, "coll"), _both(b, h, "coll_sums")
    coll, skew_warnings, clocks = sk.guard_split(coll, sums, b.infos, h.infos)  # across hosts
    warnings += skew_warnings
    long = contributions(_both(b, h, "long"), coll, cyc)
    pairs = pl.concat(
        [p.pairs.with_columns(pl.lit(p.side).alias("side")) for p in parts_b + parts_h]
    ).unique()
    renamed = al.renames(pairs)
    attribution = tb.attribution(long, t.base_cycles, t.head_cycles, n_boot, renamed, runs)
    if fallback:  # whole-run totals of runs not checked to do the same work: nothing is judged
        # (run sets would otherwise call the totals' difference significant across runs)
        v = replace(v, significant=False)
        attribution = attribution.with_columns(pl.lit(False).alias("significant"))
    if len(t.base_ms) < 2 or len(t.head_ms) < 2:
        warnings.append(vd.FEW_CYCLES)
    nb, nh = len(t.base_cycles), len(t.head_cycles)
    across = (
        st.across_gpus(long, attribution, t.base_cycles, t.head_cycles, n_boot, runs)
        if max(len(devices["base"]), len(devices["head"])) > 1
        else pl.DataFrame()
    )
    if fallback and across.height:
        across = across.with_columns(pl.lit(False).alias("significant"))
    totals = pl.concat(
        [
            p.totals.with_columns(pl.lit(s).alias("side"))
            for s, ps in (("base", parts_b), ("head", parts_h))
            for p in ps
        ]
    )
    stack_tables = _stack_tables(parts_b, parts_h, attribution)
    set_b = vd.run_set_of(v, "base", b.infos, labels[0])
    set_h = vd.run_set_of(v, "head", h.infos, labels[1])
    base, head = b.infos[0], h.infos[0]
    cycles = tb.cycle_table(cyc, b.seg.ranges, h.seg.ranges)
    return Comparison(
        base=vd.side_summary(base, b.seg, t.base_ms, vd.host_walls(b.seg), devices["base"], set_b),
        head=vd.side_summary(head, h.seg, t.head_ms, vd.host_walls(h.seg), devices["head"], set_h),
        delta_ms_per_cycle=v.delta_ms_per_cycle,
        delta_ci95=v.delta_ci95,
        delta_pct=v.delta_pct,
        significant=v.significant,
        noise_floor_ms=v.noise_floor_ms,
        residual_ms_per_cycle=v.delta_ms_per_cycle - float(attribution["delta_ms_per_cycle"].sum()),
        critical_device=t.critical_device,
        env_diffs=tuple(env_diffs(base, head)),
        attribution=attribution,
        cycles=cycles,
        events_builder=lambda: events(cyc, attribution),
        events_slice=events_slice(cycles, attribution) if events_slice else None,
        host=schema.conform_diff("host", vd.host_phases(b.seg, h.seg, n_boot, runs)),
        across_gpus=schema.conform_diff("across_gpus", across),
        collectives=sk.blank_split(tb.collectives(sums, nb, nh), clocks)
        if sums.height
        else schema.conform_diff("collectives", pl.DataFrame()),
        totals=tb.totals(totals),
        sources=stack_tables[0],
        launch_stacks=stack_tables[1],
        warnings=tuple(warnings),
        replay_inputs=replay,
        noise_unit=v.noise_unit,
        p_value=v.p_value,
        cycle_fallback=fallback,
        cycle_runs=runs.cycle_runs(),
        clocks=clocks,
    )
