"""What a run holds: sources, tool versions, table sizes, time span, GPUs and their kernel time.

Stage: inspection (`tracediff info`). Input: a `Run`; output: the plain dict that
`tracediff.report.info` renders (its JSON schema is documented there), plus
`"run_file_checksums"`: true for a run file whose tables carry checksums (all verified by the
reads here), false for an older run file without them (damage to it cannot be detected), null
for a report.
"""

from __future__ import annotations

from typing import Any

import polars as pl

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
