"""Whether the collective wait/transfer split can be trusted on runs joined across hosts.

Stage: engine (engine/pipeline/join.py, after the collective waits). Input: the collective rows
the join reads, with `wait_ns`, every collective row's waits summed (engine/pipeline/collsum.py)
and the runs' `metadata["clock_offsets"]` (parse/ranks/clocks.py); output: the rows (the split
undone where it cannot be trusted), the warnings saying why, and the clock records for the report.

The wait for the last rank is measured from start times on different GPUs. On runs whose files
came from several hosts those times are only as good as the host offsets estimated from the
collectives, and the residual skew (95th percentile of the spread of collective end times after
correction) bounds how well they agree. Where that skew is larger than the wait the split would
measure (the side's mean wait per collective), or where a host's offset could not be estimated at
all, the split is not made on either side (one side split and the other not would compare a
`[wait for last rank]` row with nothing): each collective stays one row, and a warning says so.
Runs of one host (or one file) are left as they are.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracediff.runs.runfile import Run


def clock_records(runs: list[Run]) -> list[dict[str, Any]]:
    """Each run's clock record (label, clock line, clock_offsets) where it was joined across
    hosts; [] when none was."""
    out = []
    for r in runs:
        co = r.metadata.get("clock_offsets")
        if isinstance(co, dict) and co.get("estimated"):
            out.append(
                {
                    "run": r.metadata.get("label") or str(r.path),
                    "hosts": co.get("hosts", []),
                    "collective_instances": co.get("collective_instances"),
                    "residual_skew_ns": co.get("residual_skew_ns"),
                    "skew_before_correction_median_ns": co.get("skew_before_correction_median_ns"),
                }
            )
    return out


def guard_split(
    ops: pl.DataFrame, sums: pl.DataFrame, bases: list[Run], heads: list[Run]
) -> tuple[pl.DataFrame, list[str], dict[str, Any]]:
    """(ops, warnings, {"base": records, "head": records, "split": bool, "reason": str|None}).
    `ops`: collective rows with wait_ns; `sums`: every collective row of both sides summed
    (side, w: the summed wait_ns, nw: how many rows have one; engine/pipeline/collsum.py)."""
    recs = {"base": clock_records(bases), "head": clock_records(heads)}
    info: dict[str, Any] = recs | {"split": True, "reason": None}
    if not (recs["base"] or recs["head"]) or sums.height == 0:
        return ops, [], info
    if sums["nw"].sum() == 0:  # no collective had a wait
        return ops, [], info | {"split": False}
    reason = None
    for side, rs in recs.items():
        unknown = [
            f"{h['host']} ({r['run']})" for r in rs for h in r["hosts"] if h["offset_ns"] is None
        ]
        if unknown:
            reason = (
                f"{side}: the clock offset of host {', '.join(unknown)} is not known, so the "
                "wait for the last rank across hosts cannot be measured"
            )
            break
        skew = max(((r["residual_skew_ns"] or {}).get("p95") or 0 for r in rs), default=0)
        mine = sums.filter(pl.col("side") == side)
        n, total = int(mine["nw"].sum()), int(mine["w"].sum())
        # the mean of the side's waits: exact integer sums (below 2**53 ns, as polars' mean
        # of the rows is: the same float)
        wait = total / n if n else 0.0
        if rs and skew > wait:
            reason = (
                f"{side}: the residual cross-host clock skew ({skew / 1e3:.1f} us, p95 of the "
                f"collective end spread after correction) is larger than the wait it would "
                f"measure ({wait / 1e3:.1f} us per collective on average)"
            )
            break
    if reason is None:
        return ops, [], info
    warning = f"collective wait/transfer not split: {reason}; each collective is one row"
    info |= {"split": False, "reason": reason}
    if ops.height:
        ops = ops.with_columns(pl.lit(None, pl.Int64).alias("wait_ns"))
    return ops, [warning], info


def blank_split(collectives: pl.DataFrame, clocks: dict[str, Any]) -> pl.DataFrame:
    """The collectives table, with its wait and transfer columns unknown (null) where
    `guard_split` refused the split: the time is not all transfer."""
    if clocks.get("split", True):
        return collectives
    cols = [
        c
        for c in collectives.columns
        if c.endswith(("_wait_ms_per_cycle", "_transfer_ms_per_cycle"))
    ]
    return collectives.with_columns(pl.lit(None, pl.Float64).alias(c) for c in cols)
