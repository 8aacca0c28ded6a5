"""The result of comparing two runs: the fixed contract between the engine and its consumers.

Stage: engine output. Consumers: the text/JSON report, the TUI, export, what-if.
Sides are always `base` / `head`, never named after user labels. Times in tables are ns;
per-cycle summary numbers are ms (their names say so). The tables' columns, order and types are
defined once in tracediff.runs.schema.DIFF_TABLES, and the engine conforms each frame to it as it builds
it; tests/unit/engine/test_diff_schemas.py checks the field docstrings below against it. What moved
(the change split into GPU work and host-bound idle) is computed here, once, from the
attribution: `Comparison.change_split`, which the reports and the TUI read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import polars as pl
import pyarrow as pa

from tracediff.runs import schema

KINDS = ("kernel", "memcpy", "memset", "collective", "gap", "overlap")
"""Contributor kinds. `gap`: GPU idle inside the cycle span (split by cause in `name`);
`overlap`: time saved by concurrent streams (negative contribution to span)."""

GAP_CAUSES = {
    "host": "idle: host-bound (launch began after the GPU went idle)",
    "launch": "idle: launch latency (launch call still running)",
    "wait": "idle: waiting on a dependency (launched early, GPU idle)",
    "unknown": "idle: cause unknown (no launch record)",
}
"""A `gap` contributor's `name`: why its GPU was idle (engine/statistics/attribute.py)."""


@dataclass(frozen=True)
class SideSummary:
    """One run's cycles: how they were found and their GPU-span statistics (ms)."""

    label: str
    source: str
    cycles: int
    cycle_method: str  # the cut's label: "nvtx:NAME" | "nvtx:DOMAIN:NAME" (NVTX ranges and
    # Kineto annotations alike) | "kernel-period:ANCHOR" | "whole-run"
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    wall_mean_ms: float | None  # host range wall time per cycle (None without host ranges)
    devices: list[int]
    runs: int = 1  # runs of this side (a run set: several; engine/runsets.py)
    run_means_ms: tuple[float, ...] = ()  # each run's mean cycle time, in run order
    run_labels: tuple[str, ...] = ()  # each run's label (its folder or file name)


@dataclass(frozen=True)
class EnvDiff:
    key: str
    base: Any
    head: Any


OP_COLUMNS = [
    "device_id",
    "process_id",
    "stream_id",
    "start_ns",
    "end_ns",
    "duration_ns",
    "launch_thread_id",
    "launch_start_ns",
    "launch_end_ns",
    "graph_node_id",
]
"""The columns every GPU op carries, kernels and copies alike (and in this order): the run
tables' (engine/ops.py reads them) and so `ReplayInputs.ops`'s."""


@dataclass(frozen=True)
class ReplayInputs:
    """What what-if replay (tracediff.replay) and the TUI's dependency arrows read beyond the
    diff tables. Empty for host-only comparisons (no GPU operations)."""

    ops: pl.DataFrame = field(default_factory=pl.DataFrame)
    """The aligned, attributed GPU ops of both sides (column `side`): absolute start/end, launch
    calls, cycle, slot, contributor, gap before each op and its cause (engine/statistics/attribute.py)."""
    head_api: pa.Table | None = None
    """Head's `api_calls` run table (host synchronisations)."""
    base_events: pa.Table | None = None
    """Base's `cuda_events` run table (cross-stream edges: replay/events.py, tui/edges.py)."""
    head_events: pa.Table | None = None
    """Head's `cuda_events` run table."""


# What moved: the change per cycle split into GPU work and host-bound idle.
#
# The cycle time is the critical GPU's span, and the attribution splits its change into rows that
# sum to it. Those rows are of two natures. GPU work: kernels, copies, memsets, collectives, stream
# overlap, and idle while the GPU waits on itself (a dependency between streams) — what the code
# asks the GPU to do. Host-bound idle: the GPU idle because the CPU had not launched the next op
# yet (gap causes "host" and "launch") — it follows CPU launch speed, which swings from run to run
# and process to process, so it can dwarf a real change of the GPU work in the net figure (the demo
# pair: the cycle is 35 % faster from host-bound idle while an added device copy is the code's
# change). Idle without a launch record is neither and is kept apart. The three parts sum to the
# attributed change. Read as `Comparison.change_split`.

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


EventsSlice = Callable[[str, int, int, int], pl.DataFrame]
"""`Comparison.events_slice`'s type: (side, device_id, lo, hi) -> rows of `events`."""


def _empty(table: str) -> Callable[[], pl.DataFrame]:
    return lambda: schema.empty_frame(table)


@dataclass(frozen=True, eq=False)  # identity: a comparison's frames have no useful ==
class Comparison:
    """Everything `compare` found. DataFrame columns are documented per field (and are
    tracediff.runs.schema.DIFF_TABLES). Frozen: every field is given when it is built; a caller
    that knows more (the commands: the device map, what each side was decided to be) makes a
    new one with `dataclasses.replace`."""

    base: SideSummary
    head: SideSummary
    delta_ms_per_cycle: float
    delta_ci95: tuple[float, float]
    delta_pct: float
    significant: bool
    noise_floor_ms: float  # one run a side: within-run cycle-to-cycle variation (pooled std of
    # per-cycle span); run sets: the between-run std of base's run means (`noise_unit` says which)
    residual_ms_per_cycle: float  # measured delta - sum of attribution (~0 by construction)
    critical_device: int | None  # GPU that finishes last in most head cycles
    env_diffs: tuple[EnvDiff, ...]

    attribution: pl.DataFrame
    """One row per contributor, sorted by |delta| descending. Columns:
    contributor_id (str, stable within one comparison: "c0", "c1"... in order of |delta|; "h0"... for
    host-only comparisons), kind (str, one of KINDS, or "host" for host-only comparisons), name (str;
    `old → new` for an op renamed in the same place), phase (str: the host range nested in the cycle
    that launched it, "(cycle)" without phases, "(between phases)"), device_id (i32, null = host),
    base_ms_per_cycle, head_ms_per_cycle, delta_ms_per_cycle, ci95_low, ci95_high (f64, NaN with
    fewer than 2 cycles a side), significant (bool), share (f64, delta / sum of every row's abs(delta)),
    base_count_per_cycle, head_count_per_cycle (f64), status (str: matched | added | removed | mixed
    | renamed (the same op under a new name in the same place) | replaced (another op in the same
    place) for ops; host-side for host-bound idle; "-" for other gaps, overlap and host phases),
    base_runs, head_runs (u32: runs of each side in which it occurs), consistent (bool: it moved
    the same way in every run, every head run's mean beyond every base run's; null with one run
    a side), base_name, head_name (str: a renamed or replaced op's name in base and in head; null
    otherwise)."""

    cycles: pl.DataFrame
    """One row per side × cycle × device. Columns: side ("base"|"head"), cycle (i64, 0-based in its
    run), device_id (i32), start_ns, end_ns (i64, GPU span), span_ns, busy_ns, idle_ns (i64),
    wall_ns (i64 | null: host range), critical (bool: this device finished last in this cycle)."""

    events_builder: Callable[[], pl.DataFrame] = field(default=_empty("events"), repr=False)
    """Builds `events` on first read: the report never needs it, and at millions of ops it is
    the largest table of all."""

    @cached_property
    def events(self) -> pl.DataFrame:
        """GPU operations of every cycle of both sides, for timelines and drill-down, built by
            `events_builder` on first read, then kept. Columns:
            side, cycle (i64), device_id (i32), stream_id (i64), kind (str), name (str), rel_start_ns,
        rel_end_ns (i64, relative to the cycle's GPU span start on that device), duration_ns (i64),
        slot (i64 | null: aligned position in the cycle template; equal slot = matched across sides),
        contributor_id (str), status (str: matched | added | removed), grid (str), block (str)."""
        return self.events_builder()

    events_slice: EventsSlice | None = field(default=None, repr=False)
    """`events_slice(side, device_id, lo, hi)`: the rows of `events` of one side and GPU whose
    cycle is in [lo, hi), built without building `events` (engine/pipeline/eventslices.py: the TUI reads
    the GPUs and cycles it shows). None: slice `events` itself."""

    across_gpus: pl.DataFrame = field(default_factory=_empty("across_gpus"))
    """Multi-GPU runs only (else no rows): the attribution summed over GPUs, one row per (kind, name,
    phase), sorted by |delta|: what changed, whichever GPU finished last in each cycle. Columns:
    kind, name, phase (str), devices (i64: GPUs it has a per-GPU row on), top_device_id (i32: the
    GPU whose row changed most), top_device_delta_ms_per_cycle, base_ms_per_cycle,
    head_ms_per_cycle, delta_ms_per_cycle, ci95_low, ci95_high (f64), significant (bool), share."""

    host: pl.DataFrame = field(default_factory=_empty("host"))
    """Host-side attribution of range wall time per cycle: phase (str: nested range name or
    "(outside phases)"), base_ms_per_cycle, head_ms_per_cycle, delta_ms_per_cycle, ci95_low, ci95_high,
    significant."""

    collectives: pl.DataFrame = field(default_factory=_empty("collectives"))
    """Per collective op/dtype/bytes (multi-GPU: split into wait/skew and transfer). Columns: op, dtype,
    bytes, device_id, base_ms_per_cycle, head_ms_per_cycle, base_wait_ms_per_cycle,
    head_wait_ms_per_cycle, base_transfer_ms_per_cycle, head_transfer_ms_per_cycle, delta_ms_per_cycle."""

    totals: pl.DataFrame = field(default_factory=_empty("totals"))
    """GPU time over all GPUs and all cycles (not per cycle), per kind and name: kind, name, base_ms,
    head_ms, delta_ms, base_count, head_count. What `nsys stats` totals show, for cross-checks."""

    sources: pl.DataFrame = field(default_factory=_empty("sources"))
    """Where each contributor was launched from (engine/sources.py; runs with launch stacks
    only, else no rows): contributor_id (str), file (str | null: a frame without a file), line
    (i32: the function's first line), function (str): the innermost user frame of the launch
    stacks (library frames folded), share (f64: of the contributor's GPU time, both sides,
    launched from there). Rows by attribution order, then share descending."""

    launch_stacks: pl.DataFrame = field(default_factory=_empty("launch_stacks"))
    """The whole launch stacks of each contributor (engine/sources.py; runs with launch stacks
    only, else no rows), one row per frame: contributor_id (str), side (str: "base" | "head",
    whose commit the file lines are of), stack_id (i64: parse's content hash of the call path),
    share (f64: of the contributor's GPU time, both sides, launched by this stack on this side),
    depth (i32: 0 the launching frame, library frames included), file (str | null), line (i32:
    the function's first line), function (str). Read by the commit suspects and the TUI's
    stack view."""

    warnings: tuple[str, ...] = ()

    cycle_fallback: str | None = None
    """Why the runs were compared whole instead of cycle by cycle (the cut found on base did
    not fit head, or its cycles could not be checked to hold the same loop: engine/cycle/correspond.py);
    None where the cut holds or the user asked for it."""

    device_map: tuple[dict[str, Any], ...] = ()
    """Which head GPU was compared with which base GPU (parse/ranks/gpus.py, given by the caller
    that read the runs): per pair `base` and `head` (each the GPU's identity: device_id, rank,
    rank_from, process_id, ordinal, host, file; null on the side that lacks it), `by` ("given",
    "rank", "device", "order") and `guessed` (true: matched by order, nothing said more)."""
    inputs: dict[str, Any] = field(default_factory=dict)
    """What tracediff decided each side is (parse/decided.py, given by the caller that read the
    runs): `base` / `head` each {line, runs, run_set, identities}, `allow_missing_ranks`, and
    the warnings the decisions gave. {} where no caller set it (a library compare)."""
    clocks: dict[str, Any] = field(default_factory=dict)
    """Runs joined across hosts (engine/skew.py): {"base": [...], "head": [...]} each run's host
    offsets and residual skew, "split": whether the collective wait/transfer split was made,
    "reason" when not; {} or empty lists when no run was joined across hosts."""

    noise_unit: str = "cycle"
    """What the CIs and decisions are over: "cycle" (one run a side: cycles of one process, blind
    to run-to-run variation) or "run" (run sets with >= 2 runs a side: each run's mean is one
    sample, engine/statistics/runstats.py)."""
    p_value: float | None = None
    """Run sets: the across-run permutation test's p-value for the cycle time; else None."""
    cycle_runs: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """{"base": ..., "head": ...}: the run (0-based, the side's run order: SideSummary.run_labels)
    each cycle id of `cycles` came from, at position `cycle`; {} where the engine did not say
    (a run set's cycles are numbered across its runs, engine/runsets.py)."""

    replay_inputs: ReplayInputs = field(default_factory=ReplayInputs, repr=False)
    """What the replay reads beyond the tables (the replay graph is kept beside the result, in
    tracediff.replay.cache)."""

    @cached_property
    def change_split(self) -> ChangeSplit | None:
        """What moved: `attribution`'s change split into GPU work and host-bound idle
        (`change_split`); None for a host-only comparison. Computed on first read, then kept."""
        return change_split(self.attribution)
