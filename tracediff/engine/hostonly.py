"""Host-only comparison: runs with NVTX ranges but no GPU operations.

Stage: engine. Input: two `Run`s without kernels/copies (a CPU workload, or a capture made with
`-t nvtx` on a machine without a GPU); output: a `Comparison` whose cycles are the host ranges and
whose contributors are the nested phases (kind "host"), with the verdict of the GPU path
(engine/statistics/verdict.py).
"""

from __future__ import annotations

import polars as pl

from tracediff.engine import runsets
from tracediff.engine.cycle.ranges import host_only
from tracediff.engine.cycle.segmentation import CycleRule, Segmentation
from tracediff.engine.env import env_diffs
from tracediff.engine.host_stacks import host_sources
from tracediff.engine.result import Comparison
from tracediff.engine.statistics import verdict as vd
from tracediff.engine.statistics.stats import ESTIMATE, share
from tracediff.runs import schema
from tracediff.runs.runfile import Run

WARNING = (
    "no GPU operations in either run: compared host NVTX range wall times (cycles are host "
    "ranges, contributors are phases)"
)


def compare_host(
    base: Run | list[Run],
    head: Run | list[Run],
    cycle: str | None,
    n_boot: int,
    labels: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Compare runs without GPU operations at their host ranges (`--cycle`, or found on base's
    first run and taken exactly on every other). Either side may be a run set (a list of runs;
    engine/runsets.py): then the statistics take each run's mean as one sample."""
    bases = base if isinstance(base, list) else [base]
    heads = head if isinstance(head, list) else [head]
    # a host-only run has no GPU work to cut otherwise: even 'whole' names a range here
    first = host_only(bases[0], CycleRule.range_named(cycle) if cycle else None)
    seg_b, run_b = runsets.merge([first] + [host_only(r, first.rule) for r in bases[1:]])
    seg_h, run_h = runsets.merge([host_only(r, first.rule) for r in heads])
    runs = runsets.RunIndex(run_b, run_h, len(bases), len(heads))
    wb, wh = vd.host_walls(seg_b), vd.host_walls(seg_h)
    assert wb is not None and wh is not None  # host_only cuts at ranges or refuses
    cyc_b = sorted(seg_b.ranges["cycle"].unique().to_list())
    cyc_h = sorted(seg_h.ranges["cycle"].unique().to_list())
    v = vd.verdict(wb, wh, n_boot, runs, (cyc_b, cyc_h))
    host = vd.host_phases(seg_b, seg_h, n_boot, runs, per_run=True)
    attribution = _phase_attribution(host)
    stacks, where = host_sources(bases, heads, attribution)
    host = host.drop("base_runs", "head_runs", "consistent")
    resid = v.delta_ms_per_cycle - (
        float(attribution["delta_ms_per_cycle"].sum()) if attribution.height else 0.0
    )
    side = {
        s: vd.run_set_of(v, s, of, lab)
        for s, of, lab in (("base", bases, labels[0]), ("head", heads, labels[1]))
    }
    return Comparison(
        base=vd.side_summary(bases[0], seg_b, wb, wb, [], side["base"]),
        head=vd.side_summary(heads[0], seg_h, wh, wh, [], side["head"]),
        delta_ms_per_cycle=v.delta_ms_per_cycle,
        delta_ci95=v.delta_ci95,
        delta_pct=v.delta_pct,
        significant=v.significant,
        noise_floor_ms=v.noise_floor_ms,
        residual_ms_per_cycle=resid,
        critical_device=None,
        env_diffs=tuple(env_diffs(bases[0], heads[0])),
        attribution=attribution,
        sources=where,
        launch_stacks=stacks,
        cycles=_cycles(seg_b, seg_h),
        host=schema.conform_diff("host", host),
        warnings=(
            WARNING,
            *(
                f"{side}: {w}"
                for side, seg in (("base", seg_b), ("head", seg_h))
                for w in seg.warnings
            ),
            *vd.run_set_warnings(runs),
        ),
        noise_unit=v.noise_unit,
        p_value=v.p_value,
        cycle_runs=runs.cycle_runs(),
    )


def _phase_attribution(host: pl.DataFrame) -> pl.DataFrame:
    """The host phases as contributors: kind "host", ids h0, h1..."""
    if host.height == 0:
        return schema.empty_frame("attribution")
    return schema.conform_diff(
        "attribution",
        host.with_row_index("_r").select(
            pl.concat_str([pl.lit("h"), pl.col("_r").cast(pl.String)]).alias("contributor_id"),
            pl.lit("host").alias("kind"),
            pl.col("phase").alias("name"),
            "phase",
            pl.lit(None, pl.Int32).alias("device_id"),
            *ESTIMATE[:-1],  # all but the share, computed here over these rows
            share(),
            pl.lit(1.0).alias("base_count_per_cycle"),
            pl.lit(1.0).alias("head_count_per_cycle"),
            pl.lit("-").alias("status"),
            "base_runs",
            "head_runs",
            "consistent",
            pl.lit(None, pl.String).alias("base_name"),
            pl.lit(None, pl.String).alias("head_name"),
        ),
    )


def _cycles(seg_b: Segmentation, seg_h: Segmentation) -> pl.DataFrame:
    """`Comparison.cycles` of host ranges: no device, the span is the range's wall time."""
    cyc = pl.concat(
        [
            s.ranges.group_by("cycle")
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max(), pl.col("wall_ns").max())
            .sort("cycle")  # a group_by's order is not the same every run
            .with_columns(pl.lit(side).alias("side"))
            for side, s in (("base", seg_b), ("head", seg_h))
        ]
    ).select(
        "side",
        "cycle",
        pl.lit(None, pl.Int32).alias("device_id"),
        "start_ns",
        "end_ns",
        pl.col("wall_ns").alias("span_ns"),
        pl.lit(None, pl.Int64).alias("busy_ns"),
        pl.lit(None, pl.Int64).alias("idle_ns"),
        "wall_ns",
        pl.lit(True).alias("critical"),
    )
    return schema.conform_diff("cycles", cyc)
