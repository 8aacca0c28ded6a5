"""Cycle segmentation: which GPU operations belong to which repetition of the workload's loop.

Stage: engine (segmentation), front door. `find` cuts base and returns the `CycleRule` it cut
by (engine/cycle/segmentation.py); `cut` cuts head by that same rule, so both sides' cycles are the
same kind of thing. Three kinds of cut:

- host ranges (NVTX ranges, Kineto annotations) named by `--cycle` or found automatically:
  engine/cycle/ranges.py;
- the kernel period, when the run has no markers: engine/cycle/period.py;
- the whole run as one cycle (`--cycle whole`, or neither of the above fits).
"""

from __future__ import annotations

import polars as pl

from tracediff.base.errors import AnalysisError
from tracediff.engine.cycle.period import by_kernel_period
from tracediff.engine.cycle.ranges import by_ranges, markerless_note, read_ranges
from tracediff.engine.cycle.segmentation import CycleRule, Segmentation, no_phases, no_ranges
from tracediff.runs.runfile import Run

WHOLE = ("whole", "all")
"""`--cycle whole`: the whole run is one cycle (totals; no per-cycle statistics)."""


def user_rule(cycle: str | None) -> CycleRule | None:
    """The rule `--cycle` asks for; None: find one."""
    if cycle is None:
        return None
    if cycle.lower() in WHOLE:
        return CycleRule.whole()
    return CycleRule.range_named(cycle)


def whole(ops: pl.DataFrame) -> Segmentation:
    """The whole run as a single cycle."""
    tagged = ops.with_columns(
        pl.lit(0, pl.Int64).alias("cycle"), pl.lit("(cycle)", pl.Categorical).alias("phase")
    )
    return Segmentation(ops=tagged, ranges=no_ranges(), phases=no_phases(), rule=CycleRule.whole())


def refuse_no_ops(run: Run) -> None:
    """Raise the refusal of a run without GPU operations."""
    raise AnalysisError(
        f"{run.path}: the run has no GPU operations",
        "profile with CUDA tracing on (nsys -t cuda,nvtx)",
    )


def _has_ops(run: Run, ops: pl.DataFrame) -> None:
    if ops.height == 0:
        refuse_no_ops(run)


def find(run: Run, ops: pl.DataFrame, cycle: str | None) -> Segmentation:
    """Cut the run as `--cycle` says (a range name, or "whole"), else at a host range found
    automatically, else by kernel period, else whole (with a warning). `.rule` says which."""
    _has_ops(run, ops)
    rule = user_rule(cycle)
    if rule is not None:
        return cut(run, ops, rule)
    seg = by_ranges(run, ops, None)
    if seg is None:
        try:
            seg = by_kernel_period(ops, run.path)
        except AnalysisError:
            seg = whole(ops)
            seg.warnings.append(
                "no cycle markers and no repeating kernel sequence: compared the whole run as one cycle"
            )
        # cut without its ranges: say so where all of them were the tooling's
        seg.warnings += [w for w in [markerless_note(read_ranges(run))] if w]
    return seg


def cut(run: Run, ops: pl.DataFrame, rule: CycleRule) -> Segmentation:
    """Cut the run by `rule` (the other side's, or the user's)."""
    _has_ops(run, ops)
    if rule.kind == "whole":
        return whole(ops)
    if rule.kind == "kernel-period":
        return by_kernel_period(ops, run.path, rule)
    seg = by_ranges(run, ops, rule)
    assert seg is not None  # a named range is found or refused, never skipped
    return seg
