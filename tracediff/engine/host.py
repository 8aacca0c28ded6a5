"""Host-only comparison: runs with NVTX ranges but no GPU operations.

Stage: engine. Input: two `Run`s without kernels/copies (a CPU workload, or a capture made with
`-t nvtx` on a machine without a GPU); output: a `Comparison` whose cycles are the host ranges and
whose contributors are the nested phases (kind "host"), with the same statistics as the GPU path.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff import schema
from tracediff.engine import cycles as cy
from tracediff.engine.result import Comparison
from tracediff.errors import AnalysisError
from tracediff.runfile import Run


def host_segment(
    run: Run, spec: str | None, key: tuple[str | None, str] | None = None
) -> cy.Segmentation:
    """Host-only cycles: at ranges named `spec`, at exactly `key` (the other side's), or found."""
    src = run.path
    if key is not None:
        spec = cy.key_label(key)
    ranges = cy._ranges(run)
    if ranges.height == 0:
        raise AnalysisError(
            f"{src}: the run has no GPU operations and no NVTX ranges",
            "profile with CUDA tracing on (nsys -t cuda,nvtx) or mark cycles with NVTX ranges",
        )
    if spec:
        sel = cy._match(ranges, spec) if key is None else cy._exact(ranges, key)
        if sel.height == 0:
            names = (
                ranges.group_by("key")
                .len()
                .sort("len", "key", descending=[True, False])
                .head(8)["key"]
                .to_list()
            )
            raise AnalysisError(
                f"{src}: no range named {spec!r}", f"ranges present: {', '.join(names)}"
            )
        chosen = spec
    else:
        cands = ranges.group_by("domain", "key").agg(
            pl.len().alias("n"), pl.col("depth").min().alias("depth")
        )
        cands = cands.filter(pl.col("n") >= 3)
        if cands.height == 0:
            raise AnalysisError(
                f"{src}: no GPU operations and no range repeats 3 or more times",
                "pass --cycle NAME",
            )
        pref = {p.lower(): i for i, p in enumerate(cy.PREFERRED)}
        cands = cands.with_columns(
            pl.col("key")
            .str.to_lowercase()
            .replace_strict(pref, default=len(pref), return_dtype=pl.Int64)
            .alias("_p")
        ).sort(  # ties by name: the same range every run
            ["_p", "depth", "n", "domain", "key"],
            descending=[False, False, True, False, False],
            nulls_last=False,
        )
        row = cands.row(0, named=True)
        sel = ranges.filter(
            (pl.col("key") == row["key"]) & pl.col("domain").eq_missing(row["domain"])
        )
        key = (row["domain"], row["key"])
        chosen = cy.key_label(key)
    cyc = cy._number(cy._outermost(sel))
    phases = cy._phases(ranges, cyc)
    rng = cyc.select(
        "process_id",
        "thread_id",
        "cycle",
        "start_ns",
        "end_ns",
        (pl.col("end_ns") - pl.col("start_ns")).alias("wall_ns"),
    )
    ph = phases.group_by("process_id", "cycle", "phase").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("duration_ns")
    )
    return cy.Segmentation(
        ops=pl.DataFrame(),
        ranges=rng,
        phases=ph,
        method=f"nvtx:{chosen}",
        warnings=[],
        range_key=key,
    )


def compare_host(base: Run, head: Run, cycle: str | None, n_boot: int) -> Comparison:
    from tracediff.engine import compare as cmp
    from tracediff.engine.env import env_diffs
    from tracediff.engine.stats import ESTIMATE, MIN_EFFECT_MS

    seg_b = host_segment(base, cycle)
    seg_h = host_segment(head, cycle, None if cycle else seg_b.range_key)
    walls, host = cmp._host({"base": seg_b, "head": seg_h}, n_boot)
    wb, wh = walls["base"], walls["head"]
    assert wb is not None and wh is not None
    from tracediff.engine.attribute import bootstrap_delta

    lo, hi = bootstrap_delta(wb[None, :], wh[None, :], n_boot)
    delta = float(wh.mean() - wb.mean())
    if host.height:
        attribution = host.with_row_index("_r").select(
            pl.concat_str([pl.lit("h"), pl.col("_r").cast(pl.String)]).alias("contributor_id"),
            pl.lit("host").alias("kind"),
            pl.col("phase").alias("name"),
            "phase",
            pl.lit(None, pl.Int32).alias("device_id"),
            *ESTIMATE[:-1],  # all but the share, computed here
            (pl.col("delta_ms_per_cycle") / delta if delta else pl.lit(None, pl.Float64)).alias(
                "share"
            ),
            pl.lit(1.0).alias("base_count_per_cycle"),
            pl.lit(1.0).alias("head_count_per_cycle"),
            pl.lit("-").alias("status"),
        )
    else:
        attribution = pl.DataFrame()
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
    pooled = (
        float(
            np.sqrt(
                (wb.var(ddof=1) * (len(wb) - 1) + wh.var(ddof=1) * (len(wh) - 1))
                / max(len(wb) + len(wh) - 2, 1)
            )
        )
        if len(wb) > 1 and len(wh) > 1
        else 0.0
    )
    resid = delta - float(attribution["delta_ms_per_cycle"].sum()) if attribution.height else delta
    return Comparison(
        base=cmp._side_summary(base, seg_b, wb, wb, []),
        head=cmp._side_summary(head, seg_h, wh, wh, []),
        delta_ms_per_cycle=delta,
        delta_ci95=(float(lo[0]), float(hi[0])),
        delta_pct=100.0 * delta / float(wb.mean()) if wb.mean() else float("nan"),
        significant=bool((lo[0] > 0 or hi[0] < 0) and abs(delta) >= MIN_EFFECT_MS),
        noise_floor_ms=pooled,
        residual_ms_per_cycle=resid,
        critical_device=None,
        env_diffs=env_diffs(base, head),
        attribution=attribution,
        cycles=cyc,
        events=pl.DataFrame(schema.empty_diff("events")),  # no GPU ops: none
        host=host,
        warnings=[
            "no GPU operations in either run: compared host NVTX range wall times (cycles are host ranges, contributors are phases)"
        ],
    )
