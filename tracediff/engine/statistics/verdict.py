"""The headline of a comparison: per-cycle change, its CI, noise floor, significance; each
side's summary; the host phases. One module for the GPU and the host-only paths.

Stage: engine (verdict). Input: per-cycle times of both sides (ms) and their segmentations;
output: the `Verdict`, `SideSummary` and host table that `Comparison` (engine/result.py) carries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from tracediff.engine.cycle.segmentation import Segmentation
from tracediff.engine.result import SideSummary
from tracediff.engine.runsets import RunIndex
from tracediff.engine.statistics import runstats as rs
from tracediff.engine.statistics import stats as st
from tracediff.engine.statistics.attribute import bootstrap_delta
from tracediff.runs.runfile import Run

FEW_CYCLES = "fewer than 2 cycles on a side: no confidence intervals, nothing is called significant"


@dataclass(frozen=True)
class Verdict:
    """The change of the mean cycle time, head - base (ms per cycle)."""

    delta_ms_per_cycle: float
    delta_ci95: tuple[float, float]  # bootstrap over cycles; NaN with fewer than 2 a side
    delta_pct: float  # of base's mean; NaN when base's mean is 0
    significant: bool  # the CI excludes 0 and the change is at least stats.MIN_EFFECT_MS
    noise_floor_ms: float  # pooled within-run std of the per-cycle time (0 with < 2 cycles);
    # run sets: the between-run std of base's run means
    noise_unit: str = "cycle"  # "run": CI and decision over runs (engine/statistics/runstats.py)
    p_value: float | None = None  # run sets: the across-run test's p-value
    run_means_ms: tuple[list[float], list[float]] = ([], [])  # each base / head run's mean
    # cycle time (given `runs`); the side summaries show them


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


def verdict(
    b: np.ndarray,
    h: np.ndarray,
    n_boot: int,
    runs: RunIndex | None = None,
    cycles: tuple[list[int], list[int]] | None = None,
) -> Verdict:
    """The verdict on per-cycle times `b` (base) and `h` (head), in ms. With run sets (`runs`
    across runs, and the cycle ids of `b` and `h`), each run's mean cycle time is one sample:
    the change is of the mean over runs, its CI and decision engine/statistics/runstats.py's."""
    means: tuple[list[float], list[float]] = ([], [])
    if runs is not None and cycles is not None and max(runs.runs_base, runs.runs_head) > 1:
        means = (
            run_means_ms(b, runs.of("base", cycles[0]), runs.runs_base),
            run_means_ms(h, runs.of("head", cycles[1]), runs.runs_head),
        )
    if runs is not None and runs.across_runs and cycles is not None:
        t = rs.across_runs(np.array([means[0]]), np.array([means[1]]))
        d = float(t.delta_ms[0])
        low, high = float(t.ci95_low[0]), float(t.ci95_high[0])
        return Verdict(
            delta_ms_per_cycle=d,
            delta_ci95=(low, high),
            delta_pct=100.0 * d / float(t.base_ms[0]) if t.base_ms[0] else float("nan"),
            significant=bool((low > 0 or high < 0) and abs(d) >= st.MIN_EFFECT_MS),
            noise_floor_ms=float(t.spread_ms[0]),
            noise_unit="run",
            p_value=float(t.p_value[0]),
            run_means_ms=means,
        )
    lo, hi = bootstrap_delta(b[None, :], h[None, :], n_boot)
    delta = float(h.mean() - b.mean())
    return Verdict(
        delta_ms_per_cycle=delta,
        delta_ci95=(float(lo[0]), float(hi[0])),
        delta_pct=100.0 * delta / float(b.mean()) if b.mean() else float("nan"),
        # a NaN CI compares False both ways: never significant
        significant=bool((lo[0] > 0 or hi[0] < 0) and abs(delta) >= st.MIN_EFFECT_MS),
        noise_floor_ms=pooled_std(b, h),
        run_means_ms=means,
    )


def run_means_ms(values: np.ndarray, run_of: np.ndarray, n_runs: int) -> list[float]:
    """Each run's mean of `values` (one per cycle), runs without cycles left out."""
    m = rs.run_means(values[None, :], run_of, n_runs)[0]
    return [float(x) for x in m if not np.isnan(x)]


def run_set_of(
    v: Verdict, side: str, of: list[Run], label: str | None
) -> tuple[str, list[float], list[str]] | None:
    """`side_summary`'s `run_set` for a side of several runs `of` (None for one run): the side's
    label (the user's folder name), each run's mean cycle time (from the verdict) and label."""
    if len(of) == 1:
        return None
    means = v.run_means_ms[0 if side == "base" else 1]
    return (label or of[0].label, means, [r.label for r in of])


def run_set_warnings(runs: RunIndex) -> list[str]:
    """What the run counts leave unmeasured or undecidable."""
    nb, nh = runs.runs_base, runs.runs_head
    if nb == 1 and nh == 1:
        return []
    if nb < 2 or nh < 2:
        return [
            f"base has {nb} run(s), head {nh}: run-to-run variation needs >= 2 runs a side; "
            "the CIs are over cycles, as for one run a side"
        ]
    if rs.min_p(nb, nh) >= rs.ALPHA:
        return [
            f"{nb} vs {nh} runs cannot reach 5 % significance across runs (the smallest p-value "
            f"is {rs.min_p(nb, nh):.2f}): nothing is called significant; capture >= 4 runs a side"
        ]
    return []


def side_summary(
    run: Run,
    seg: Segmentation,
    spans_ms: np.ndarray,
    wall_ms: np.ndarray | None,
    devices: list[int],
    run_set: tuple[str, list[float], list[str]] | None = None,
) -> SideSummary:
    """One side's cycle statistics: per-cycle time `spans_ms`, host range wall time `wall_ms`.
    A run set (`run_set`: its label, each run's mean cycle time and label): the mean is the
    mean over runs (each run weighs the same, as in the verdict); the percentiles over cycles."""
    q = np.percentile(spans_ms, [50, 90, 99]) if len(spans_ms) else [float("nan")] * 3
    label, means, labels = run_set if run_set else (run.label, [float(spans_ms.mean())], [])
    return SideSummary(
        label=label,
        source=str(run.metadata.get("source", "")),
        cycles=len(spans_ms),
        cycle_method=seg.rule.label,
        mean_ms=float(np.mean(means)) if run_set else float(spans_ms.mean()),
        p50_ms=float(q[0]),
        p90_ms=float(q[1]),
        p99_ms=float(q[2]),
        min_ms=float(spans_ms.min()),
        max_ms=float(spans_ms.max()),
        std_ms=float(spans_ms.std(ddof=1)) if len(spans_ms) > 1 else 0.0,
        wall_mean_ms=float(wall_ms.mean()) if wall_ms is not None and len(wall_ms) else None,
        devices=devices,
        runs=len(means),
        run_means_ms=tuple(means),
        run_labels=tuple(labels),
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


def host_phases(
    base: Segmentation,
    head: Segmentation,
    n_boot: int,
    runs: RunIndex | None = None,
    per_run: bool = False,
) -> pl.DataFrame:
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
        st.per_cycle_stats(long, ["phase"], cb, ch, n_boot, runs)
        .sort(st.BY_CHANGE)  # ties (an unchanged phase): phase order, the same every run
        .drop("_k", *(() if per_run else ("base_runs", "head_runs", "consistent")))
    )
