"""The types of cycle segmentation: the rule that cuts a run into cycles, and a run cut by it.

Stage: engine (segmentation). `engine/cycle/find.py` finds a `CycleRule` on base and cuts head by the
same rule (`engine/cycle/ranges.py`: host ranges; `engine/cycle/period.py`: the repeating kernel sequence);
`Segmentation` is one side so cut. The rule travels from base to head as this value, never as
its display label (`CycleRule.label`, shown as `SideSummary.cycle_method`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

RangeKey = tuple[str | None, str]
"""(domain, name) of a host range; domain None: the default domain."""


def key_label(key: RangeKey) -> str:
    """A range key as the user writes it: NAME, or DOMAIN:NAME."""
    return key[1] if key[0] is None else f"{key[0]}:{key[1]}"


@dataclass(frozen=True)
class DeviceCut:
    """How one GPU's op sequence is cut (kernel period): every `period` ops, at `anchor` (an op
    of the repeating body occurring once per period: the cycle's first op)."""

    device_id: int
    anchor: str
    period: int


@dataclass(frozen=True)
class CycleRule:
    """Which boundaries delimit a cycle.

    - kind "range": host ranges (NVTX, Kineto annotations). `key` = exactly that (domain, name)
      (a range found automatically: the other side is cut at the same one, not at a name that is
      also another domain's); else `name` = the user's `--cycle` (NAME in any domain, else
      DOMAIN:NAME).
    - kind "kernel-period": the repeating op sequence of each GPU, cut as `cuts` say (per GPU:
      the anchor op and the period, found on base; head is cut by the same).
    - kind "whole": the whole run is one cycle.

    `label` is for display only: "nvtx:NAME" | "nvtx:DOMAIN:NAME" | "kernel-period:ANCHOR" |
    "whole-run".
    """

    kind: Literal["range", "kernel-period", "whole"]
    label: str
    key: RangeKey | None = None
    name: str | None = None
    cuts: tuple[DeviceCut, ...] = ()

    @staticmethod
    def whole() -> CycleRule:
        return CycleRule("whole", "whole-run")

    @staticmethod
    def range_at(key: RangeKey) -> CycleRule:
        return CycleRule("range", f"nvtx:{key_label(key)}", key=key)

    @staticmethod
    def range_named(name: str) -> CycleRule:
        return CycleRule("range", f"nvtx:{name}", name=name)

    @staticmethod
    def kernel_period(cuts: tuple[DeviceCut, ...], anchor_label: str) -> CycleRule:
        return CycleRule("kernel-period", f"kernel-period:{anchor_label}", cuts=cuts)


@dataclass
class Segmentation:
    """One run cut into cycles by `rule`."""

    ops: pl.DataFrame
    """GPU ops inside cycles, with `cycle` (i64) and `phase` (categorical)."""
    ranges: pl.DataFrame
    """process_id, thread_id, cycle, start_ns, end_ns, wall_ns: the host range of each cycle
    (empty for kernel-period and whole-run cuts)."""
    phases: pl.DataFrame
    """process_id, cycle, phase, duration_ns: host time of the ranges nested in each cycle."""
    rule: CycleRule
    warnings: list[str] = field(default_factory=list)


def no_ranges() -> pl.DataFrame:
    """`Segmentation.ranges` of a cut without host ranges."""
    return pl.DataFrame(
        schema={
            "process_id": pl.Int64,
            "thread_id": pl.Int64,
            "cycle": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
            "wall_ns": pl.Int64,
        }
    )


def no_phases() -> pl.DataFrame:
    """`Segmentation.phases` of a cut without host ranges."""
    return pl.DataFrame(
        schema={
            "process_id": pl.Int64,
            "cycle": pl.Int64,
            "phase": pl.String,
            "duration_ns": pl.Int64,
        }
    )
