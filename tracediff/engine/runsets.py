"""Run sets in the compare pipeline: several runs per side, one cycle rule, the run as the unit.

Stage: engine (segmentation → statistics). Input: each side's runs, each cut by the one rule
base's first run was cut by (engine/cycle/find.py); output: one `Segmentation` per side whose cycles
are numbered across its runs, and the `RunIndex` that says which run each cycle came from, so
the statistics (engine/statistics/stats.py, engine/statistics/verdict.py) can take each run's mean as one sample
(engine/statistics/runstats.py says why and how).

Every run of both sides is cut by the same rule; a run that cannot be cut by it is refused by
name, never cut another way. Within a side the runs' cycles are aligned to one template like any
other cycles (engine/cycle/align.py), so an op that appears in only some runs is found as such: its
`base_runs` / `head_runs` count says in how many.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.engine.cycle.segmentation import CycleRule, Segmentation


@dataclass(frozen=True)
class RunIndex:
    """Which run each cycle of each side came from (cycle ids index the arrays)."""

    base: np.ndarray  # run number (0-based) of base cycle c, at position c
    head: np.ndarray
    runs_base: int
    runs_head: int

    @property
    def across_runs(self) -> bool:
        """Whether the statistics take the run as the unit: at least 2 runs on each side."""
        return self.runs_base >= 2 and self.runs_head >= 2

    def of(self, side: str, cycles: list[int]) -> np.ndarray:
        """The run of each of `cycles` of `side`."""
        return (self.base if side == "base" else self.head)[np.asarray(cycles, dtype=np.int64)]

    def runs(self, side: str) -> int:
        return self.runs_base if side == "base" else self.runs_head

    def cycle_runs(self) -> dict[str, tuple[int, ...]]:
        """`Comparison.cycle_runs`: each side's run of each cycle id."""
        return {
            "base": tuple(int(r) for r in self.base),
            "head": tuple(int(r) for r in self.head),
        }


def _dense_pid(frame: pl.DataFrame) -> pl.DataFrame:
    """process_id renumbered 0, 1, ... in id order: each run is its own process, and the host
    phases are read from each run's first process (verdict.host_phases takes the lowest id)."""
    if frame.height == 0 or "process_id" not in frame.columns:
        return frame
    return frame.with_columns(
        (pl.col("process_id").rank("dense") - 1).cast(pl.Int64).alias("process_id")
    )


def _top(frame: pl.DataFrame) -> int:
    """The largest cycle id of a frame, -1 when it has no rows."""
    if frame.height == 0:
        return -1
    top = frame["cycle"].max()
    return int(top) if isinstance(top, int) else -1


def merge(segs: list[Segmentation]) -> tuple[Segmentation, np.ndarray]:
    """One side's runs, each cut by the same rule, as one segmentation whose cycles are numbered
    across the runs (run 0's first, then run 1's, ...), and the run of each cycle id. Each run's
    ops are given up to the merged frame (one copy alive)."""
    if len(segs) == 1:
        seg = segs[0]
        n = max(_top(seg.ops), _top(seg.ranges)) + 1  # host-only cuts have ranges, no ops
        return seg, np.zeros(n, dtype=np.int64)
    ops, ranges, phases, run_of = [], [], [], []
    offset = 0
    warnings: list[str] = []
    for i, seg in enumerate(segs):
        n = max(_top(seg.ops), _top(seg.ranges)) + 1
        shift = pl.col("cycle") + offset
        # host-only runs (NVTX, no CUDA trace) have an ops frame without columns
        ops.append(seg.ops.with_columns(shift) if "cycle" in seg.ops.columns else seg.ops)
        ranges.append(_dense_pid(seg.ranges).with_columns(shift))
        phases.append(_dense_pid(seg.phases).with_columns(shift))
        run_of.append(np.full(n, i, dtype=np.int64))
        warnings += [f"run {i + 1}: {w}" for w in seg.warnings]
        seg.ops = seg.ops.clear()
        offset += n
    same = all(o.schema == ops[0].schema for o in ops)
    merged = Segmentation(
        ops=pl.concat(ops, how="vertical" if same else "diagonal_relaxed"),
        ranges=pl.concat(ranges, how="vertical_relaxed"),
        phases=pl.concat(phases, how="vertical_relaxed"),
        rule=segs[0].rule,
        warnings=warnings,
    )
    return merged, np.concatenate(run_of)


def merge_reduced(
    parts: list[tuple[pl.DataFrame, pl.DataFrame, list[str], int]], rule: CycleRule
) -> tuple[Segmentation, np.ndarray, list[int]]:
    """`merge` of runs already reduced (engine/pipeline/reduce.py): each run's (ranges, phases,
    segmentation warnings, cycle count). Returns the side's segmentation without ops, the run
    of each cycle id and each run's first cycle id."""
    if len(parts) == 1:
        ranges, phases, warnings, n = parts[0]
        seg = Segmentation(ops=pl.DataFrame(), ranges=ranges, phases=phases, rule=rule)
        seg.warnings = list(warnings)
        return seg, np.zeros(n, dtype=np.int64), [0]
    rng, phs, run_of, offsets, warns = [], [], [], [], []
    offset = 0
    for i, (ranges, phases, warnings, n) in enumerate(parts):
        shift = pl.col("cycle") + offset
        rng.append(_dense_pid(ranges).with_columns(shift))
        phs.append(_dense_pid(phases).with_columns(shift))
        run_of.append(np.full(n, i, dtype=np.int64))
        warns += [f"run {i + 1}: {w}" for w in warnings]
        offsets.append(offset)
        offset += n
    merged = Segmentation(
        ops=pl.DataFrame(),
        ranges=pl.concat(rng, how="vertical_relaxed"),
        phases=pl.concat(phs, how="vertical_relaxed"),
        rule=rule,
        warnings=warns,
    )
    return merged, np.concatenate(run_of), offsets
