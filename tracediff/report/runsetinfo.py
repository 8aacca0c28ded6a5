"""What a run set holds: its runs, each with its cycles and kernels (`tracediff info RUNSET/`).

Stage: inspection. Input: a run-set `Side` (parse/sides.py); output: the plain dict `render`
writes as a table or JSON. The runs are read one at a time (memory grows with the largest run,
not with the set) and cut as `compare` cuts a side: the first run by the rule found for it
(engine/cycles.find), every other run by that same rule, so the cycle counts shown are the ones
compare works with. A run the rule cannot cut shows no count and says why. A run set whose
first run has no GPU operations (an NVTX-only capture) is cut at its host ranges, as compare does
(engine/ranges.host_only).

Each run's mean cycle time is the number compare's run-set statistics take as that run's sample
(engine/statistics/verdict.py): the mean over its cycles of the cycle's span on its critical device (the
device that finishes last; ties: the longer span, then the lower device id: engine/statistics/attribute.py's
rule), or, host-only, of the cycle range's wall time (the longest process's).

JSON schema (stable, for scripts):
  {"run_set": str, "cycle_rule": str|null, "runs": [{"path": str, "source_format": str|null,
   "cycles": int|null, "mean_cycle_ms": float|null, "kernels": int, "kernel_time_ns": int,
   "span_ns": int|null, "cycle_error": str|null}], "warnings": [str]}
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracediff.base.errors import TracediffError
from tracediff.parse.sides import Side


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


def render_table(info: dict[str, Any]) -> str:
    from tracediff.report.text import safe_lines

    runs = info["runs"]
    lines = [
        info["decided"],
        f"run set         {info['run_set']} ({len(runs)} runs)",
        f"cycles cut by   {info['cycle_rule'] or '-'} (the first run's rule, as compare cuts)",
    ]
    width = max(12, *(len(r["path"]) for r in runs))
    lines.append(
        f"  {'run':<{width}} {'cycles':>7} {'mean cycle':>13} {'kernels':>9} {'kernel time':>14}"
    )
    for r in runs:
        cyc = "?" if r["cycles"] is None else str(r["cycles"])
        mean = "?" if r["mean_cycle_ms"] is None else f"{r['mean_cycle_ms']:.3f}"
        lines.append(
            f"  {r['path']:<{width}} {cyc:>7} {mean:>10} ms {r['kernels']:>9} "
            f"{r['kernel_time_ns'] / 1e6:>11.3f} ms"
        )
        if r["cycle_error"]:
            lines.append(f"    not cut: {r['cycle_error']}")
    return safe_lines(lines)


def render(info: dict[str, Any], fmt: str) -> str:
    from tracediff.report.jsonout import dumps
    from tracediff.report.numbers import settled

    info = settled(info)  # printed precision: the same bytes on every CPU
    return dumps(info) if fmt == "json" else render_table(info)
