"""The headline of a comparison: per-cycle change, its CI, noise floor, significance; each
side's summary; the host phases. One module for the GPU and the host-only paths.

Stage: engine (verdict). Input: per-cycle times of both sides (ms) and their segmentations;
output: the `Verdict`, `SideSummary` and host table that `Comparison` (engine/result.py) carries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.engine import stats as st
from tracediff.engine.attribute import bootstrap_delta
from tracediff.engine.result import SideSummary
from tracediff.engine.segmentation import Segmentation
from tracediff.runfile import Run

FEW_CYCLES = "fewer than 2 cycles on a side: no confidence intervals, nothing is called significant"


@dataclass(frozen=True)
class Verdict:
    """The change of the mean cycle time, head - base (ms per cycle)."""

    delta_ms_per_cycle: float
    delta_ci95: tuple[float, float]  # bootstrap over cycles; NaN with fewer than 2 a side
    delta_pct: float  # of base's mean; NaN when base's mean is 0
    significant: bool  # the CI excludes 0 and the change is at least stats.MIN_EFFECT_MS
    noise_floor_ms: float  # pooled within-run std of the per-cycle time (0 with < 2 cycles)


def pooled_std(b: np.ndarray, h: np.ndarray) -> float:
    """Pooled within-run standard deviation of two samples; 0 when a side has < 2 values."""
    if len(b) < 2 or len(h) < 2:
        return 0.0
    return float(
        np.sqrt(
            ((len(b) - 1) * b.var(ddof=1) + (len(h) - 1) * h.var(ddof=1))
            / max(len(b) + len(h) - 2, 1)
        )
    )


def verdict(b: np.ndarray, h: np.ndarray, n_boot: int) -> Verdict:
    """The verdict on per-cycle times `b` (base) and `h` (head), in ms."""
    lo, hi = bootstrap_delta(b[None, :], h[None, :], n_boot)
    delta = float(h.mean() - b.mean())
    return Verdict(
        delta_ms_per_cycle=delta,
        delta_ci95=(float(lo[0]), float(hi[0])),
        delta_pct=100.0 * delta / float(b.mean()) if b.mean() else float("nan"),
        # a NaN CI compares False both ways: never significant
        significant=bool((lo[0] > 0 or hi[0] < 0) and abs(delta) >= st.MIN_EFFECT_MS),
        noise_floor_ms=pooled_std(b, h),
    )


def side_summary(
    run: Run,
    seg: Segmentation,
    spans_ms: np.ndarray,
    wall_ms: np.ndarray | None,
    devices: list[int],
) -> SideSummary:
    """One side's cycle statistics: per-cycle time `spans_ms`, host range wall time `wall_ms`."""
    q = np.percentile(spans_ms, [50, 90, 99]) if len(spans_ms) else [float("nan")] * 3
    return SideSummary(
        label=run.label,
        source=str(run.metadata.get("source", "")),
        cycles=len(spans_ms),
        cycle_method=seg.rule.label,
        mean_ms=float(spans_ms.mean()),
        p50_ms=float(q[0]),
        p90_ms=float(q[1]),
        p99_ms=float(q[2]),
        min_ms=float(spans_ms.min()),
        max_ms=float(spans_ms.max()),
        std_ms=float(spans_ms.std(ddof=1)) if len(spans_ms) > 1 else 0.0,
        wall_mean_ms=float(wall_ms.mean()) if wall_ms is not None and len(wall_ms) else None,
        devices=devices,
    )


def host_walls(seg: Segmentation) -> np.ndarray | None:
    """Host range wall time per cycle (ms; the longest process's), None without host ranges."""
    if seg.ranges.height == 0:
        return None
    w = seg.ranges.group_by("cycle").agg(pl.col("wall_ns").max()).sort("cycle")
    return w["wall_ns"].to_numpy() / 1e6


def _phases_long(seg: Segmentation, side: str) -> pl.DataFrame:
    """(cycle, phase, duration_ns, side) of the first process (ranks run the same code), with
    the time outside every nested range as the phase "(outside phases)"."""
    p0 = seg.ranges["process_id"].min()
    ph = seg.phases.filter(pl.col("process_id") == p0)
    inside = ph.group_by("cycle").agg(pl.col("duration_ns").sum().alias("_in"))
    rw = seg.ranges.filter(pl.col("process_id") == p0).select("cycle", "wall_ns")
    outside = rw.join(inside, on="cycle", how="left").select(
        "cycle",
        pl.lit("(outside phases)").alias("phase"),
        (pl.col("wall_ns") - pl.col("_in").fill_null(0)).alias("duration_ns"),
    )
    return pl.concat([ph.select("cycle", "phase", "duration_ns"), outside]).with_columns(
        pl.lit(side).alias("side")
    )


def host_phases(base: Segmentation, head: Segmentation, n_boot: int) -> pl.DataFrame:
    """Host-side attribution of range wall time per cycle (`Comparison.host`); empty unless
    both sides were cut at host ranges."""
    if base.ranges.height == 0 or head.ranges.height == 0:
        return pl.DataFrame()
    long = pl.concat([_phases_long(base, "base"), _phases_long(head, "head")]).rename(
        {"duration_ns": "value_ns"}
    )
    cb = sorted(base.ranges["cycle"].unique().to_list())
    ch = sorted(head.ranges["cycle"].unique().to_list())
    return (
        st.per_cycle_stats(long, ["phase"], cb, ch, n_boot)
        .sort(st.BY_CHANGE)  # ties (an unchanged phase): phase order, the same every run
        .drop("_k")
    )
