"""What a run or a run set holds: `tracediff info`'s computing half (the report renders it).

Stage: inspection. `summarize(run)`: sources, tool versions, table sizes, time span, GPUs and
their kernel time, as the plain dict that `tracediff.report.info` renders (its JSON schema is
documented there), plus `"run_file_checksums"`: true for a run file whose tables carry
checksums (all verified by the reads here), false for an older run file without them (damage to
it cannot be detected), null for a report.

`summarize_set(side)`: a run set's runs (parse/sides.py `Side`), each with its cycles and
kernels, as the plain dict `tracediff.report.runsetinfo` renders (its JSON schema is there). The
runs are read one at a time (memory grows with the largest run, not with the set) and cut as
`compare` cuts a side: the first run by the rule found for it (engine/cycle/find.py), every other
run by that same rule, so the cycle counts shown are the ones compare works with. A run the rule
cannot cut shows no count and says why. A run set whose first run has no GPU operations (an
NVTX-only capture) is cut at its host ranges, as compare does (engine/cycle/ranges.py
host_only). Each run's mean cycle time is the number compare's run-set statistics take as that
run's sample (engine/statistics/verdict.py): the mean over its cycles of the cycle's span on its
critical device (the device that finishes last; ties: the longer span, then the lower device
id: engine/statistics/attribute.py's rule), or, host-only, of the cycle range's wall time (the
longest process's).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracediff.base.errors import TracediffError
from tracediff.parse.sides import Side
from tracediff.runs import schema
from tracediff.runs.runfile import Run


def _frame(run: Run, table: str) -> pl.DataFrame:
    df = pl.from_arrow(run.table(table))
    assert isinstance(df, pl.DataFrame)
    return df


def summarize(run: Run) -> dict[str, Any]:
    k = _frame(run, "kernels")
    per_dev = (
        k.group_by("device_id")
        .agg(
            pl.len().alias("kernels"),
            # a kernel ending before it starts is a damaged record (warned at load): no time
            pl.col("duration_ns").clip(lower_bound=0).sum().alias("kernel_time_ns"),
        )
        .sort("device_id")
    )
    devs = _frame(run, "devices")
    # a device listed by several processes: per column its first known value, in table order
    # (unique() kept any one row, so a null name could win, by run)
    props = devs.group_by("device_id", maintain_order=True).agg(
        pl.col(c).drop_nulls().first() for c in ("name", "sm_count", "memory_bytes")
    )
    per_dev = per_dev.join(props, on="device_id", how="full", coalesce=True).sort("device_id")
    starts: list[int] = []
    ends: list[int] = []
    for t in ("kernels", "memops", "api_calls", "nvtx_ranges"):
        tab = _frame(run, t)
        lo, hi = tab["start_ns"].min(), tab["end_ns"].max()
        starts += [int(lo)] if lo is not None else []  # type: ignore[arg-type]
        ends += [int(hi)] if hi is not None else []  # type: ignore[arg-type]
    m = run.metadata
    from dataclasses import asdict

    from tracediff.parse import identity as idn
    from tracediff.parse.decided import compact, describe
    from tracediff.parse.ranks.gpus import gpus_of

    gpus = [asdict(g) for g in gpus_of(run)]
    return {
        "decided": describe("input", [run], False)["line"],
        "identity": compact(idn.of(run)),
        "source": m.get("source"),
        "source_format": m.get("source_format"),
        "tool_versions": {
            "nsys": m.get("nsys_version"),
            "nsys_schema": m.get("nsys_schema_version"),
            "tracediff_format": schema.FORMAT_VERSION,
        },
        "time_origin_utc_ns": m.get("time_origin_utc_ns"),
        "tables": {t: run.table(t).num_rows for t in schema.TABLES},
        "span_ns": {"start": min(starts) if starts else None, "end": max(ends) if ends else None},
        "devices": per_dev.select(
            "device_id",
            "name",
            "sm_count",
            "memory_bytes",
            pl.col("kernels").fill_null(0),
            pl.col("kernel_time_ns").fill_null(0),
        ).to_dicts(),
        "gpus": gpus,
        "files": [f.get("source") for f in m.get("files", [])],
        "clock": m.get("clock"),
        **({"clock_offsets": m["clock_offsets"]} if m.get("clock_offsets") else {}),
        "kernels": {
            "count": k.height,
            "total_time_ns": int(k["duration_ns"].clip(lower_bound=0).sum() or 0),
        },
        "run_file_checksums": run.checksums,  # every table was read above: all verified
        "warnings": run.warnings,
    }


def _cycles(seg: Any) -> int:
    if seg.ops.height == 0:  # host-only: the cycles are the host ranges
        return int(seg.ranges["cycle"].n_unique())
    return int(seg.ops["cycle"].drop_nulls().n_unique())


def mean_cycle_ms(seg: Any) -> float | None:
    """A run's mean cycle time as compare's run-set statistics take it (see the docstring)."""
    from tracediff.engine.statistics.verdict import host_walls

    if seg.ops.height == 0:
        walls = host_walls(seg)
        return None if walls is None or len(walls) == 0 else float(walls.mean())
    per_device = (
        seg.ops.filter(pl.col("cycle").is_not_null())
        .group_by("cycle", "device_id")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"))
    )
    critical = per_device.sort(
        "cycle", "end_ns", "span_ns", "device_id", descending=[False, True, True, False]
    ).unique("cycle", keep="first", maintain_order=True)
    return float(critical["span_ns"].mean()) / 1e6 if critical.height else None


def summarize_set(
    side: Side,
    cycle: str | None = None,
    *,
    allow_missing_ranks: bool = False,
    layout: str = "auto",
) -> dict[str, Any]:
    """Per run of `side`: cycles (cut by the first run's rule), kernels, kernel time, span;
    the runs checked to be one workload's (parse/grouping.py) and what was decided."""
    from tracediff.engine.cycle import find as cycles
    from tracediff.engine.cycle.ranges import host_only
    from tracediff.engine.cycle.segmentation import CycleRule
    from tracediff.engine.ops import gpu_ops_counted
    from tracediff.parse import identity as idn
    from tracediff.parse import load
    from tracediff.parse.decided import describe_metadata
    from tracediff.parse.grouping import check_run_set, run_name

    rule = None
    host = None  # decided on the first run, as compare decides on base's first run
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    metas: list[dict[str, Any]] = []
    for path in side.runs:
        run = load(path, allow_missing_ranks=allow_missing_ranks)
        idn.of(run)
        metas.append({k: run.metadata.get(k) for k in ("identity", "clock_offsets")})
        warnings += run.warnings
        k = pl.from_arrow(run.table("kernels"))
        assert isinstance(k, pl.DataFrame)
        row: dict[str, Any] = {
            "path": str(path),
            "source_format": run.metadata.get("source_format"),
            "cycles": None,
            "mean_cycle_ms": None,
            "kernels": k.height,
            "kernel_time_ns": int(k["duration_ns"].clip(lower_bound=0).sum() or 0),
            "span_ns": None,
            "cycle_error": None,
        }
        if k.height:
            lo, hi = k["start_ns"].min(), k["end_ns"].max()
            if lo is not None and hi is not None:
                row["span_ns"] = int(hi) - int(lo)  # type: ignore[arg-type]
        ops, _ = gpu_ops_counted(run)
        if host is None:
            host = ops.height == 0
        try:
            if host:
                seg = host_only(run, rule or (CycleRule.range_named(cycle) if cycle else None))
            elif rule is None:
                seg = cycles.find(run, ops, cycle)
            else:
                seg = cycles.cut(run, ops, rule)
            if rule is None:
                rule = seg.rule
                warnings += seg.warnings
            row["cycles"] = _cycles(seg)
            row["mean_cycle_ms"] = mean_cycle_ms(seg)
        except TracediffError as e:
            row["cycle_error"] = e.message
        rows.append(row)
        del run, k, ops
    names = [run_name(side.path, p) for p in side.runs]
    warnings += check_run_set(
        [m["identity"] for m in metas],
        names,
        side.path,
        indexed=side.indexed,
        forced=layout == "runs",
    )
    return {
        "decided": describe_metadata("input", metas, True)["line"],
        "run_set": str(side.path),
        "cycle_rule": rule.label if rule is not None else None,
        "runs": rows,
        "warnings": warnings,
    }
