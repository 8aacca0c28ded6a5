"""`tracediff info RUN|REPORT [--format json]`: what a run holds.

JSON schema (stable, for scripts):
  {"source": str, "source_format": str, "tool_versions": {"nsys": str|null, "nsys_schema": str|null,
   "tracediff_format": int}, "time_origin_utc_ns": int|null,
   "tables": {table: row_count}, "span_ns": {"start": int|null, "end": int|null},
   "devices": [{"device_id", "name", "sm_count", "memory_bytes", "kernels", "kernel_time_ns"}],
   "kernels": {"count": int, "total_time_ns": int}, "warnings": [str]}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, help="run file or any report tracediff can parse")
    p.add_argument("--format", choices=["table", "json"], default="table")


def summarize(path: Path) -> dict[str, Any]:
    import polars as pl

    from tracediff import schema
    from tracediff.parse import load

    run = load(path)
    k = pl.from_arrow(run.table("kernels"))
    assert isinstance(k, pl.DataFrame)
    per_dev = (
        k.group_by("device_id")
        .agg(pl.len().alias("kernels"), pl.col("duration_ns").sum().alias("kernel_time_ns"))
        .sort("device_id")
    )
    devs = pl.from_arrow(run.table("devices"))
    assert isinstance(devs, pl.DataFrame)
    # a device listed by several processes: per column its first known value, in table order
    # (unique() kept any one row, so a null name could win, by run)
    props = devs.group_by("device_id", maintain_order=True).agg(
        pl.col(c).drop_nulls().first() for c in ("name", "sm_count", "memory_bytes")
    )
    per_dev = per_dev.join(
        props,
        on="device_id",
        how="full",
        coalesce=True,
    ).sort("device_id")
    starts: list[int] = []
    ends: list[int] = []
    for t in ("kernels", "memops", "api_calls", "nvtx_ranges"):
        tab = pl.from_arrow(run.table(t))
        assert isinstance(tab, pl.DataFrame)
        lo, hi = tab["start_ns"].min(), tab["end_ns"].max()
        starts += [int(lo)] if lo is not None else []  # type: ignore[arg-type]
        ends += [int(hi)] if hi is not None else []  # type: ignore[arg-type]
    m = run.metadata
    return {
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
        "kernels": {"count": k.height, "total_time_ns": int(k["duration_ns"].sum() or 0)},
        "warnings": run.warnings,
    }


def run(args: argparse.Namespace) -> int:
    import orjson

    info = summarize(args.path)
    if args.format == "json":
        sys.stdout.write(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    for w in info["warnings"]:
        print(f"tracediff: warning: {w}", file=sys.stderr)
    tv = info["tool_versions"]
    lines = [
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
    for d in info["devices"]:
        lines.append(
            f"  GPU {d['device_id']:<3} {d['name'] or '?':<24} {d['kernels']:>9} kernels "
            f"{d['kernel_time_ns'] / 1e6:>12.3f} ms"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
