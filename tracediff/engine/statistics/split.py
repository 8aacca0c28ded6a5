"""What moved: the change per cycle split into GPU work and host-bound idle.

Stage: engine (verdict). Input: a comparison's attribution table; output: a `ChangeSplit`.

The cycle time is the critical GPU's span, and the attribution splits its change into rows that
sum to it. Those rows are of two natures. GPU work: kernels, copies, memsets, collectives, stream
overlap, and idle while the GPU waits on itself (a dependency between streams) — what the code
asks the GPU to do. Host-bound idle: the GPU idle because the CPU had not launched the next op
yet (gap causes "host" and "launch") — it follows CPU launch speed, which swings from run to run
and process to process, so it can dwarf a real change of the GPU work in the net figure (the demo
pair: the cycle is 35 % faster from host-bound idle while an added device copy is the code's
change). Idle without a launch record is neither and is kept apart. The three parts sum to the
attributed change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl

from tracediff.engine.statistics.attribute import GAP_CAUSES

Part = Literal["gpu_work", "host_bound_idle", "unknown_idle"]
Moved = Literal["gpu_work", "host_bound_idle", "both"]

HOST_BOUND = (GAP_CAUSES["host"], GAP_CAUSES["launch"])
UNKNOWN = GAP_CAUSES["unknown"]
MOSTLY = 2 / 3
"""A part "moved" alone when it holds at least this much of the summed |part changes|."""


@dataclass(frozen=True)
class ChangeSplit:
    """The change in ms per cycle, head - base, by part (sums of attribution rows)."""

    gpu_work_delta_ms_per_cycle: float
    host_bound_idle_delta_ms_per_cycle: float
    unknown_idle_delta_ms_per_cycle: float
    gpu_work_base_ms_per_cycle: float
    moved: Moved | None  # which part holds most of the change; None when nothing changed
    gpu_work_significant: int  # GPU-work rows whose change is significant
    top_gpu_work: dict[str, object] | None  # the GPU-work row with the largest significant
    # |change| (else the largest change): its contributor_id, kind, name, phase, device_id,
    # delta_ms_per_cycle, significant, status, base_name, head_name


def part_of() -> pl.Expr:
    """Each attribution row's part (`Part`), from its kind and, for gaps, its cause."""
    gap = pl.col("kind") == "gap"
    return (
        pl.when(gap & pl.col("name").is_in(HOST_BOUND))
        .then(pl.lit("host_bound_idle"))
        .when(gap & (pl.col("name") == UNKNOWN))
        .then(pl.lit("unknown_idle"))
        .otherwise(pl.lit("gpu_work"))
        .alias("part")
    )


def change_split(attribution: pl.DataFrame) -> ChangeSplit | None:
    """The split of a GPU comparison; None for a host-only one (its rows are host phases)."""
    if attribution.height == 0 or (attribution["kind"] == "host").all():
        return None
    att = attribution.with_columns(part_of())
    # maintain_order: a float sum in rows' order, the same every run (an unordered group-by
    # sums in an order of its threads' making: the last digit differed between runs)
    sums = dict(
        att.group_by("part", maintain_order=True)
        .agg(pl.col("delta_ms_per_cycle").sum(), pl.col("base_ms_per_cycle").sum().alias("base"))
        .select("part", pl.struct("delta_ms_per_cycle", "base"))
        .iter_rows()
    )

    def part(name: Part, field: str = "delta_ms_per_cycle") -> float:
        return float(sums[name][field]) if name in sums else 0.0

    gpu, host, unknown = part("gpu_work"), part("host_bound_idle"), part("unknown_idle")
    total = abs(gpu) + abs(host) + abs(unknown)
    moved: Moved | None = None
    if total > 0:
        moved = (
            "gpu_work"
            if abs(gpu) >= MOSTLY * total
            else "host_bound_idle"
            if abs(host) >= MOSTLY * total
            else "both"
        )
    work = att.filter(pl.col("part") == "gpu_work", pl.col("delta_ms_per_cycle") != 0)
    sig = work.filter(pl.col("significant"))
    pick = sig if sig.height else work
    top = None
    if pick.height:
        # rows are sorted by |change| then key: the first is the largest, the same every run
        top = pick.select(
            "contributor_id",
            "kind",
            "name",
            "phase",
            "device_id",
            "delta_ms_per_cycle",
            "significant",
            "status",
            "base_name",
            "head_name",
        ).row(0, named=True)
    return ChangeSplit(
        gpu_work_delta_ms_per_cycle=gpu,
        host_bound_idle_delta_ms_per_cycle=host,
        unknown_idle_delta_ms_per_cycle=unknown,
        gpu_work_base_ms_per_cycle=part("gpu_work", "base"),
        moved=moved,
        gpu_work_significant=sig.height,
        top_gpu_work=top,
    )
