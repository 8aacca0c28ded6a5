"""What a run set holds, rendered: its runs, each with its cycles and kernels (`tracediff info RUNSET/`).

Stage: output. Input: the plain dict engine/runinfo.py's `summarize_set` computes (each run
cut as `compare` cuts a side, its mean cycle time as compare's run-set statistics take it);
output: a table or JSON.

JSON schema (stable, for scripts):
  {"run_set": str, "cycle_rule": str|null, "runs": [{"path": str, "source_format": str|null,
   "cycles": int|null, "mean_cycle_ms": float|null, "kernels": int, "kernel_time_ns": int,
   "span_ns": int|null, "cycle_error": str|null}], "warnings": [str]}
"""

from __future__ import annotations

from typing import Any


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
