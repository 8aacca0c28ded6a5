"""`tracediff info`: a run summary (tracediff.engine.runinfo.summarize) as a table or JSON.

Stage: output. Input: the summary dict; output: a string for stdout (the warnings it holds are
the command's to print on stderr).

JSON schema (stable, for scripts):
  {"decided": str (what tracediff decided the input is, in one line: parse/decided.py),
   "identity": {...} (the run's identity, parse/identity.py, without the fingerprint's sketches),
   "source": str, "source_format": str, "tool_versions": {"nsys": str|null, "nsys_schema": str|null,
   "tracediff_format": int}, "time_origin_utc_ns": int|null,
   "tables": {table: row_count}, "span_ns": {"start": int|null, "end": int|null},
   "devices": [{"device_id", "name", "sm_count", "memory_bytes", "kernels", "kernel_time_ns"}],
   "gpus": [{"device_id", "rank", "rank_from", "process_id", "ordinal", "host", "file"}],
   "files": [str] (a run joined from several files: each, in join order; else []),
   "clock": str|null (joined runs: how the files were put on one clock),
   "clock_offsets": {...} (joined runs only: parse/ranks/clocks.py's record: "hosts" [{"host",
     "offset_ns"|null, "instances", "offset_spread_ns", "reference"}], "collective_instances",
     "residual_skew_ns" {"median", "p95", "max"}, "skew_before_correction_median_ns", "note",
     "estimated": whether the files came from several hosts and offsets were applied),
   "kernels": {"count": int, "total_time_ns": int}, "warnings": [str]}
"""

from __future__ import annotations

from typing import Any

from tracediff.report.jsonout import dumps
from tracediff.report.numbers import settled
from tracediff.report.text import safe_lines

FORMATS = ("table", "json")


def render_table(info: dict[str, Any]) -> str:
    tv = info["tool_versions"]
    lines = [
        info["decided"],
        f"source          {info['source']} ({info['source_format']})",
        f"nsys            {tv['nsys'] or '-'} (schema {tv['nsys_schema'] or '-'}); "
        f"run format {tv['tracediff_format']}",
    ]
    span = info["span_ns"]
    if span["start"] is not None:
        lines.append(f"time span       {(span['end'] - span['start']) / 1e6:.3f} ms")
    lines.append("tables          " + ", ".join(f"{t}={n}" for t, n in info["tables"].items()))
    k = info["kernels"]
    lines.append(f"kernels         {k['count']} kernels, {k['total_time_ns'] / 1e6:.3f} ms total")
    if info.get("files"):
        lines.append(f"files           {len(info['files'])} joined; {info.get('clock') or '-'}")
    ranks = {g["device_id"]: g for g in info.get("gpus", [])}
    for d in info["devices"]:
        g = ranks.get(d["device_id"], {})
        who = f" rank {g['rank']}" if g.get("rank") is not None else ""
        lines.append(
            f"  GPU {d['device_id']:<3} {d['name'] or '?':<24} {d['kernels']:>9} kernels "
            f"{d['kernel_time_ns'] / 1e6:>12.3f} ms{who}"
        )
    return safe_lines(lines)


def render(info: dict[str, Any], fmt: str) -> str:
    info = settled(info)  # printed precision: the same bytes on every CPU
    return dumps(info) if fmt == "json" else render_table(info)
