"""The result of comparing two runs: the fixed contract between the engine and its consumers.

Stage: engine output. Consumers: the text/JSON report, the TUI, export, what-if.
Sides are always `base` / `head`, never named after user labels. Times in tables are ns;
per-cycle summary numbers are ms (their names say so). The tables' columns and export types are
defined once in tracediff.schema.DIFF_TABLES; tests/unit/test_diff_schemas.py checks the field
docstrings below and the engine's frames against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

KINDS = ("kernel", "memcpy", "memset", "collective", "gap", "overlap")
"""Contributor kinds. `gap`: GPU idle inside the cycle span (split by cause in `name`);
`overlap`: time saved by concurrent streams (negative contribution to span)."""


@dataclass(frozen=True)
class SideSummary:
    """One run's cycles: how they were found and their GPU-span statistics (ms)."""

    label: str
    source: str
    cycles: int
    cycle_method: str  # "nvtx:<domain:>name" | "kineto:<annotation>" | "kernel-period:<anchor>"
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    wall_mean_ms: float | None  # host range wall time per cycle (None without host ranges)
    devices: list[int]


@dataclass(frozen=True)
class EnvDiff:
    key: str
    base: Any
    head: Any


@dataclass
class Comparison:
    """Everything `compare` found. DataFrame columns are documented per field."""

    base: SideSummary
    head: SideSummary
    delta_ms_per_cycle: float
    delta_ci95: tuple[float, float]
    delta_pct: float
    significant: bool
    noise_floor_ms: float  # within-run cycle-to-cycle variation (pooled std of per-cycle span)
    residual_ms_per_cycle: float  # measured delta - sum of attribution (~0 by construction)
    critical_device: int | None  # GPU that finishes last in most head cycles
    env_diffs: list[EnvDiff]

    attribution: pl.DataFrame
    """One row per contributor, sorted by |delta| descending. Columns:
    contributor_id (str, stable within one comparison: "c0", "c1"... in order of |delta|; "h0"... for
    host-only comparisons), kind (str, one of KINDS, or "host" for host-only comparisons), name (str;
    `old → new` for an op renamed in the same place), phase (str: the host range nested in the cycle
    that launched it, "(cycle)" without phases, "(between phases)"), device_id (i32, null = host),
    base_ms_per_cycle, head_ms_per_cycle, delta_ms_per_cycle, ci95_low, ci95_high (f64, NaN with
    fewer than 2 cycles a side), significant (bool), share (f64, delta / total delta),
    base_count_per_cycle, head_count_per_cycle (f64), status (str: matched | added | removed | mixed
    for ops; host-side for host-bound idle; "-" for other gaps, overlap and host phases)."""

    cycles: pl.DataFrame
    """One row per side × cycle × device. Columns: side ("base"|"head"), cycle (i64, 0-based in its
    run), device_id (i32), start_ns, end_ns (i64, GPU span), span_ns, busy_ns, idle_ns (i64),
    wall_ns (i64 | null: host range), critical (bool: this device finished last in this cycle)."""

    events: pl.DataFrame
    """(May be handed over as a zero-argument callable: built on first access.) GPU operations of every cycle of both sides, for timelines and drill-down. Columns:
    side, cycle (i64), device_id (i32), stream_id (i64), kind (str), name (str), rel_start_ns,
    rel_end_ns (i64, relative to the cycle's GPU span start on that device), duration_ns (i64),
    slot (i64 | null: aligned position in the cycle template; equal slot = matched across sides),
    contributor_id (str), status (str: matched | added | removed), grid (str), block (str)."""

    across_gpus: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Multi-GPU runs only (else empty): the attribution summed over GPUs, one row per (kind, name,
    phase), sorted by |delta|: what changed, whichever GPU finished last in each cycle. Columns:
    kind, name, phase (str), devices (u32: GPUs it has a per-GPU row on), top_device_id (i32: the
    GPU whose row changed most), top_device_delta_ms_per_cycle, base_ms_per_cycle,
    head_ms_per_cycle, delta_ms_per_cycle, ci95_low, ci95_high (f64), significant (bool), share."""

    host: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Host-side attribution of range wall time per cycle: phase (str: nested range name or
    "(outside phases)"), base_ms_per_cycle, head_ms_per_cycle, delta_ms_per_cycle, ci95_low, ci95_high,
    significant."""

    collectives: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per collective op/dtype/bytes (multi-GPU: split into wait/skew and transfer). Columns: op, dtype,
    bytes, device_id, base_ms_per_cycle, head_ms_per_cycle, base_wait_ms_per_cycle,
    head_wait_ms_per_cycle, base_transfer_ms_per_cycle, head_transfer_ms_per_cycle, delta_ms_per_cycle."""

    totals: pl.DataFrame = field(default_factory=pl.DataFrame)
    """GPU time over all GPUs and all cycles (not per cycle), per kind and name: kind, name, base_ms,
    head_ms, delta_ms, base_count, head_count. What `nsys stats` totals show, for cross-checks."""

    warnings: list[str] = field(default_factory=list)

    def __getattribute__(self, name: str) -> Any:
        # `events` may be handed over as a zero-argument callable and built on first access: the
        # report never needs it, and at millions of ops it is the largest table of all.
        value = object.__getattribute__(self, name)
        if name == "events" and callable(value):
            value = value()
            object.__setattr__(self, name, value)
        return value

    replay_inputs: dict[str, Any] = field(default_factory=dict, repr=False)
    """Engine-internal inputs of what-if replay (tracediff.replay): "ops", the aligned ops of both
    sides with launch times and gaps; "head_api", head's API calls (host syncs). (The replay
    graph is kept beside the result, in tracediff.replay.cache.) Not a stable contract."""
