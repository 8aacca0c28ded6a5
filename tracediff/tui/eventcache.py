"""The TUI's events, fetched per GPU and block of cycles when first shown, then kept.

Stage: presentation (data access). Input: a `Comparison`; output: the rows of its `events` for a
(side, GPU, cycle range), from `Comparison.events_slice` (engine/pipeline/eventslices.py: a filter of
one run's kept ops, or the run set's files read again for that GPU and those cycles, in this
process or on the Dask workers) or, for a comparison without one, from `events` itself. A fetch
asks for whole blocks of `BLOCK` cycles, so stepping through cycles fetches once a block; every
fetch is logged (`log`), which says what was loaded and what was not.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import polars as pl

from tracediff.engine.result import Comparison
from tracediff.runs import schema

BLOCK = 8
"""Cycles a fetch asks for at once (aligned blocks: cycle // BLOCK)."""


@dataclass(frozen=True)
class Fetch:
    side: str
    device_id: int
    lo: int  # cycles [lo, hi)
    hi: int
    rows: int


class EventCache:
    """What the timeline, the worst-cycle jump and the drill-down read: events by (side, GPU,
    cycles). Thread-safe (the app fetches in its thread workers); one fetch at a time."""

    def __init__(self, c: Comparison) -> None:
        self.c = c
        self._fetch = c.events_slice or self._from_events
        tops = c.cycles.group_by("side").agg(pl.col("cycle").max())
        self.ends = {str(s): int(t) + 1 for s, t in tops.iter_rows() if t is not None}
        self._blocks: dict[tuple[str, int, int], pl.DataFrame] = {}
        self._lock = threading.Lock()
        self.log: list[Fetch] = []
        self._none: pl.DataFrame | None = None  # no rows, the fetched frames' columns

    def _from_events(self, side: str, device: int, lo: int, hi: int) -> pl.DataFrame:
        return self.c.events.filter(
            (pl.col("side") == side)
            & (pl.col("device_id") == device)
            & (pl.col("cycle") >= lo)
            & (pl.col("cycle") < hi)
        )

    def has(self, side: str, device: int, lo: int, hi: int) -> bool:
        """Whether [lo, hi) of (side, device) is fetched already (a redraw need not wait)."""
        return all((side, device, b) in self._blocks for b in self._block_ids(side, lo, hi))

    def _block_ids(self, side: str, lo: int, hi: int) -> range:
        hi = min(hi, self.ends.get(side, 0))
        return range(lo // BLOCK, -(-hi // BLOCK)) if hi > lo else range(0)

    def get(self, side: str, device: int, lo: int, hi: int) -> pl.DataFrame:
        """The events of (side, device) with a cycle in [lo, hi), fetching missing blocks."""
        ids = self._block_ids(side, lo, hi)
        with self._lock:
            missing = [b for b in ids if (side, device, b) not in self._blocks]
            for b0, b1 in _runs(missing):  # consecutive blocks in one fetch
                self._load(side, device, b0 * BLOCK, min(b1 * BLOCK, self.ends[side]))
            parts = [self._blocks[(side, device, b)] for b in ids]
        if not parts:
            return schema.empty_frame("events") if self._none is None else self._none
        got = pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]
        if ids and (lo > ids[0] * BLOCK or hi < (ids[-1] + 1) * BLOCK):
            got = got.filter((pl.col("cycle") >= lo) & (pl.col("cycle") < hi))
        return got

    def _load(self, side: str, device: int, lo: int, hi: int) -> None:
        ev = self._fetch(side, device, lo, hi)
        self.log.append(Fetch(side, device, lo, hi, ev.height))
        if self._none is None:
            self._none = ev.clear()
        block = (pl.col("cycle") // BLOCK).alias("_b")
        parts = ev.with_columns(block).partition_by("_b", as_dict=True, include_key=False)
        for b in range(lo // BLOCK, -(-hi // BLOCK)):
            self._blocks[(side, device, b)] = parts.get((b,), ev.clear())

    def devices_fetched(self) -> set[int]:
        return {f.device_id for f in self.log}

    @property
    def rows(self) -> int:
        """Event rows held."""
        return sum(f.rows for f in self.log)


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Sorted block ids as [first, end) runs of consecutive ids."""
    out: list[tuple[int, int]] = []
    for b in ids:
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0], b + 1)
        else:
            out.append((b, b + 1))
    return out
