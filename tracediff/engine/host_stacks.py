"""Launch stacks of host phases: the functions each NVTX phase ran in (issue 19, host-only runs).

Stage: engine output, host-only comparisons (engine/hostonly.py). Input: both sides' runs and the
host attribution (kind "host", a row per phase); output: `Comparison.launch_stacks` and
`Comparison.sources` for those rows, as engine/sources.py gives them for GPU ops, so the commit
suspects (tracediff/suspects/), `compare --repo` and `tracediff bisect`'s search order work on
runs without a GPU too.

A phase range's stack is that of the innermost nsys function-trace range (domains
`python:MODULE`, what `tracediff capture` records by default) on its thread holding the range's
midpoint, resolved as for a kernel's launch (parse/stacks/launch_stacks.py, frames as
parse/nsys/stacks.py names them): an NVTX `verify` pushed inside `pkg.work.verify`, called from
`pkg.work.cycle`, has the stack verify <- cycle. A phase's ranges are the closed ranges of the
user's domains named as the phase (its name without a trailing #N, every process); each weighs
its wall time, so a stack's share is the phase's time spent under it over its time on both
sides. Runs without function-trace ranges give no rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracediff.engine import sources
from tracediff.parse.nsys.stacks import frame_tables, function_ranges
from tracediff.parse.stacks import launch_stacks as ls
from tracediff.runs.runfile import Run
from tracediff.runs.schema import empty_frame
from tracediff.runs.stackdomain import FUNCTION_DOMAIN


def _run_stacks(run: Run, names: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(phase, stack_id, _t) summed over this run's ranges of the named phases, and its stack
    frames (stack_id, depth, file, line, function); empty without function-trace ranges."""
    table = run.table("nvtx_ranges")
    fn = function_ranges(table)
    if not fn.height:
        return pl.DataFrame(), pl.DataFrame()
    nv = pl.from_arrow(table)
    assert isinstance(nv, pl.DataFrame)
    ph = nv.select(
        "process_id",
        "thread_id",
        "start_ns",
        "end_ns",
        pl.col("name").cast(pl.String).str.replace(r"#\d+$", "").alias("phase"),
        own=~pl.col("domain").cast(pl.String).fill_null("").str.starts_with(FUNCTION_DOMAIN),
        kind=pl.col("range_kind").cast(pl.String),
    ).filter(
        pl.col("own")
        & (pl.col("kind") != "mark")
        & pl.col("phase").is_in(names)
        & pl.col("end_ns").is_not_null()
        & pl.col("process_id").is_not_null()
        & pl.col("thread_id").is_not_null()
    )
    if not ph.height:
        return pl.DataFrame(), pl.DataFrame()
    start, end = ph["start_ns"].to_numpy(), ph["end_ns"].to_numpy()
    fp, ft, fs, fe = (fn[c].to_numpy() for c in ("process_id", "thread_id", "start_ns", "end_ns"))
    got = ls.resolve(
        ph["process_id"].to_numpy(), ph["thread_id"].to_numpy(), start + (end - start) // 2,
        fp, ft, fs, fe, fn["text"],
    )  # fmt: skip
    if not got.frame_ids.size:
        return pl.DataFrame(), pl.DataFrame()
    sums = (
        ph.select("phase", (pl.col("end_ns") - pl.col("start_ns")).alias("_t"))
        .with_columns(pl.Series("stack_id", got.stack_id).replace(0, None))
        .group_by("phase", "stack_id")
        .agg(pl.col("_t").sum())
    )
    frames, stacks = frame_tables(got)
    fr = pl.from_arrow(frames)
    st = pl.from_arrow(stacks)
    assert isinstance(fr, pl.DataFrame) and isinstance(st, pl.DataFrame)
    return sums, st.join(fr, on="frame_id").select(
        "stack_id",
        "depth",
        pl.col("file").cast(pl.String),
        "line",
        pl.col("function").cast(pl.String),
    )


def host_sources(
    bases: Sequence[Run], heads: Sequence[Run], attribution: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(`launch_stacks`, `sources`) of the host attribution's phases (empty frames when the
    runs have no function-trace ranges)."""
    none = empty_frame("launch_stacks"), empty_frame("sources")
    host = attribution.filter(pl.col("kind") == "host")
    names = host["name"].cast(pl.String).to_list()
    if not names:
        return none
    sums: list[pl.DataFrame] = []
    frames: dict[str, list[pl.DataFrame]] = {"base": [], "head": []}
    for side, runs in (("base", bases), ("head", heads)):
        for run in runs:
            s, f = _run_stacks(run, names)
            if s.height:
                sums.append(s.with_columns(pl.lit(side).alias("side")))
                frames[side].append(f)
    if not sums:
        return none
    # in the shape engine/sources.py reads: a host row's key is (kind, name, phase, device)
    per = pl.concat(sums).select(
        pl.lit("host").alias("kind"),
        pl.col("phase").alias("name"),
        "phase",
        pl.lit(None, pl.Int32).alias("device_id"),
        "stack_id",
        "_t",
        "side",
    )
    fb, fh = (sources.frames_joined(frames[s]) for s in ("base", "head"))
    both = sources.frames_joined([fb, fh])
    return (
        sources.launch_stacks(per, attribution, fb, fh),
        sources.sources(per, attribution, both),
    )
