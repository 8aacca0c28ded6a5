"""What a run set holds: its runs, each with its cycles and kernels (`tracediff info RUNSET/`).

Stage: inspection. Input: a run-set `Side` (parse/sides.py); output: the plain dict `render`
writes as a table or JSON. The runs are read one at a time (memory grows with the largest run,
not with the set) and cut as `compare` cuts a side: the first run by the rule found for it
(engine/cycles.find), every other run by that same rule, so the cycle counts shown are the ones
compare works with. A run the rule cannot cut shows no count and says why.

JSON schema (stable, for scripts):
  {"run_set": str, "cycle_rule": str|null, "runs": [{"path": str, "source_format": str|null,
   "cycles": int|null, "kernels": int, "kernel_time_ns": int, "span_ns": int|null,
   "cycle_error": str|null}], "warnings": [str]}
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracediff.errors import TracediffError
from tracediff.parse.sides import Side


def _cycles(seg: Any) -> int:
    return int(seg.ops["cycle"].drop_nulls().n_unique())


def summarize_set(side: Side, cycle: str | None = None) -> dict[str, Any]:
    """Per run of `side`: cycles (cut by the first run's rule), kernels, kernel time, span."""
    from tracediff.engine import cycles
    from tracediff.engine.ops import gpu_ops_counted
    from tracediff.parse import load

    rule = None
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for path in side.runs:
        run = load(path)
        warnings += run.warnings
        k = pl.from_arrow(run.table("kernels"))
        assert isinstance(k, pl.DataFrame)
        row: dict[str, Any] = {
            "path": str(path),
            "source_format": run.metadata.get("source_format"),
            "cycles": None,
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
        try:
            if rule is None:
                seg = cycles.find(run, ops, cycle)
                rule = seg.rule
                warnings += seg.warnings
            else:
                seg = cycles.cut(run, ops, rule)
            row["cycles"] = _cycles(seg)
        except TracediffError as e:
            row["cycle_error"] = e.message
        rows.append(row)
        del run, k, ops
    return {
        "run_set": str(side.path),
        "cycle_rule": rule.label if rule is not None else None,
        "runs": rows,
        "warnings": warnings,
    }


def render_table(info: dict[str, Any]) -> str:
    from tracediff.report.text import safe_lines

    runs = info["runs"]
    lines = [
        f"run set         {info['run_set']} ({len(runs)} runs)",
        f"cycles cut by   {info['cycle_rule'] or '-'} (the first run's rule, as compare cuts)",
    ]
    width = max(12, *(len(r["path"]) for r in runs))
    lines.append(f"  {'run':<{width}} {'cycles':>7} {'kernels':>9} {'kernel time':>14}")
    for r in runs:
        cyc = "?" if r["cycles"] is None else str(r["cycles"])
        lines.append(
            f"  {r['path']:<{width}} {cyc:>7} {r['kernels']:>9} "
            f"{r['kernel_time_ns'] / 1e6:>11.3f} ms"
        )
        if r["cycle_error"]:
            lines.append(f"    not cut: {r['cycle_error']}")
    return safe_lines(lines)


def render(info: dict[str, Any], fmt: str) -> str:
    from tracediff.report.jsonout import dumps

    return dumps(info) if fmt == "json" else render_table(info)
