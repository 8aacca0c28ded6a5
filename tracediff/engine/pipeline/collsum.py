"""A run's collective instances summed where the run is reduced: what the driver's join reads.

Stage: engine (the end of the per-file stage: engine/pipeline/reduce.py for a run read whole,
engine/pipeline/rankmerge.py for a run of rank files once its files are back). Input: the run's
collective rows (`Reduced.coll`: the k-th collective of each device's cycle; `summed`: a run's
in one frame, `Holding`: a rank file's at a time) and its per-device cycles (`Reduced.cyc`);
output: `Summed`.

The k-th collective of a cycle on every GPU is one instance; its last rank to start sets when
the transfer can begin (each row's wait: `waits`). A run's cycles are its own (engine/runsets.py
numbers each run's after the one before), so an instance never spans runs and its waits are
known once the run's rows are: the join (engine/pipeline/join.py) needs of them only

- `crit`: the rows on each cycle's critical GPU (the device that finished the cycle last, as
  join.cycles_of decides it), with wait_ns: the contributions of collectives;
- `sums`: per kernel name, bytes and device, the summed durations and waits and the count of
  waits: the collectives table (engine/tables.py) and the clock-skew guard (engine/skew.py);
- `inst`: per instance (cycle, k) its last start and rank count: the TUI's event slices
  (engine/pipeline/eventslices.py).

A run of 512 ranks a side of 500 cycles has 3 M collective rows a side; what is kept of them is
one GPU's rows per cycle, the instances and a row per kernel name and device (issue 32).

A run of rank files (engine/pipeline/rankmerge.py) hands its rows over file by file as each
comes back; until the last is back, the driver holds of each file (`Holding`) what the waits and
sums read: per row its instance, start, duration and a code of its (name, bytes, device), in
32 bits where the values fit (24 bytes a row, not 57), and the whole rows only of devices that
can still lead a cycle; the instances' last start and rank count are a running max and count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import polars as pl

SUMS = {"name": pl.Categorical, "bytes": pl.Int64, "device_id": pl.Int64, "t": pl.Int64,
        "w": pl.Int64, "nw": pl.UInt32}  # fmt: skip
"""`Summed.sums` of no rows: t the summed duration_ns, w the summed wait_ns, nw how many rows
had one (of rows, the columns' types are the rows')."""


INST = ["cycle", "k"]  # an instance: the k-th collective of a cycle on every GPU
ROW = ["cycle", "k", "start_ns", "duration_ns"]
GROUP = ["name", "bytes", "device_id"]  # a row of `Summed.sums`


def _no_sums() -> pl.DataFrame:
    return pl.DataFrame(schema=SUMS)


def _no_inst() -> pl.DataFrame:
    return pl.DataFrame(schema={"cycle": pl.Int64, "k": pl.Int64, "_last": pl.Int64,
                                "_ranks": pl.UInt32})  # fmt: skip


@dataclass
class Summed:
    """One run's collective rows as the join reads them (module doc)."""

    crit: pl.DataFrame = field(default_factory=pl.DataFrame)
    sums: pl.DataFrame = field(default_factory=_no_sums)
    inst: pl.DataFrame = field(default_factory=_no_inst)


def first_per_cycle(lead: pl.DataFrame) -> pl.DataFrame:
    """Per cycle, its leading row of `lead` (cycle, device_id, end_ns, span_ns): the later end,
    then the longer span, then the lower device (join.cycles_of's `critical`)."""
    order = ["cycle", "end_ns", "span_ns", "device_id"]
    return lead.sort(order, descending=[False, True, True, False]).unique(
        "cycle", keep="first", maintain_order=True
    )


def leading(cyc: pl.DataFrame) -> pl.DataFrame:
    """cycle, device_id, end_ns, span_ns: per cycle of `cyc` (Reduced.cyc) the device that
    finished it last."""
    return first_per_cycle(
        cyc.select(
            "cycle",
            pl.col("device_id").cast(pl.Int32),
            "end_ns",
            (pl.col("end_ns") - pl.col("start_ns")).alias("span_ns"),
        )
    )


def summed(coll: pl.DataFrame, cyc: pl.DataFrame) -> Summed:
    """`Summed` of a run read whole: its collective rows (cycle, device_id, k, kind,
    contributor, phase, name, bytes, start_ns, duration_ns) and its cycles (a run of rank files:
    `Holding`)."""
    if coll.height == 0:
        return Summed()
    inst = coll.group_by(INST).agg(
        pl.col("start_ns").max().alias("_last"), pl.len().alias("_ranks")
    )
    w = waits(coll, inst)
    sums = w.group_by(GROUP).agg(
        pl.col("duration_ns").sum().alias("t"),
        pl.col("wait_ns").sum().alias("w"),
        pl.col("wait_ns").count().alias("nw"),
    )
    crit = [_on(w, leading(cyc).select("cycle", "device_id"))] if cyc.height else []
    return _summed(crit, [sums], coll, inst)


@dataclass
class Held:
    """One rank file's collective rows as the driver holds them (module doc)."""

    rows: pl.DataFrame  # cycle, k, start_ns, duration_ns (32 bits where they fit), g
    groups: pl.DataFrame  # g, name, bytes, device_id: what each code of `rows` stands for
    wide: pl.DataFrame  # every column; the rows of devices that can still lead a cycle


class Holding:
    """A run's collective rows as its rank files come back (module doc)."""

    def __init__(self) -> None:
        self.inst: pl.DataFrame | None = None

    def held(self, coll: pl.DataFrame, keep: Callable[[pl.DataFrame], pl.DataFrame]) -> Held:
        """A file's rows (`Reduced.coll`) held; `keep`: its wide rows that can still lead."""
        if coll.height == 0:
            return Held(pl.DataFrame(), pl.DataFrame(), coll)
        mine = coll.group_by(INST).agg(
            pl.col("start_ns").max().alias("_last"), pl.len().alias("_ranks")
        )
        if self.inst is None:
            self.inst = mine
        else:
            both = pl.concat([self.inst, mine], how="vertical_relaxed")
            self.inst = both.group_by(INST).agg(
                pl.col("_last").max(), pl.col("_ranks").sum().cast(pl.UInt32)
            )
        groups = coll.select(GROUP).unique(maintain_order=True).with_row_index("g")
        rows = coll.select(*ROW, *GROUP).join(
            groups, on=GROUP, how="left", maintain_order="left", nulls_equal=True
        )
        return Held(_narrow(rows.select(*ROW, "g"), ["cycle", "k", "duration_ns"]), groups,
                    keep(coll))  # fmt: skip

    def summed(self, held: list[Held], cyc: pl.DataFrame) -> Summed:
        """`summed` of the files' held rows (`held` in the run's file order) and its cycles."""
        inst = self.inst
        frames = [h for h in held if h.rows.height]
        if inst is None or not frames:
            return Summed()
        lead = leading(cyc).select("cycle", "device_id") if cyc.height else None
        crit, sums = [], []
        for h in frames:
            w = (
                waits(h.rows, inst)
                .group_by("g")
                .agg(
                    pl.col("duration_ns").cast(pl.Int64).sum().alias("t"),
                    pl.col("wait_ns").sum().alias("w"),
                    pl.col("wait_ns").count().alias("nw"),
                )
            )
            sums.append(h.groups.join(w, on="g").select(*GROUP, "t", "w", "nw"))
            if lead is not None and h.wide.height:
                crit.append(_on(waits(h.wide, inst), lead))
        return _summed(crit, sums, frames[0].wide, inst)


def _narrow(frame: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """`frame` with those of `cols` whose values all fit in 32 bits cast to Int32."""
    lo, hi = -(1 << 31), (1 << 31) - 1
    got = frame.select(
        pl.all_horizontal(
            pl.col(c).min().fill_null(0) >= lo, pl.col(c).max().fill_null(0) <= hi
        ).alias(c)
        for c in cols
    ).row(0)
    return frame.with_columns(
        pl.col(c).cast(pl.Int32) for c, ok in zip(cols, got, strict=True) if ok
    )


def _on(w: pl.DataFrame, lead: pl.DataFrame) -> pl.DataFrame:
    keys = lead.with_columns(pl.col("device_id").cast(w.schema["device_id"]))
    return w.join(keys, on=["cycle", "device_id"], how="semi", maintain_order="left")


def _summed(
    crit: list[pl.DataFrame], sums: list[pl.DataFrame], first: pl.DataFrame, inst: pl.DataFrame
) -> Summed:
    total = pl.concat(sums, how="vertical_relaxed")
    if len(sums) > 1:
        total = total.group_by(GROUP, maintain_order=True).agg(
            pl.col("t").sum(), pl.col("w").sum(), pl.col("nw").sum()
        )
    rows = [c for c in crit if c.height]
    return Summed(
        crit=pl.concat(rows, how="vertical_relaxed")
        if rows
        else first.clear().with_columns(pl.lit(None, pl.Int64).alias("wait_ns")),
        sums=total,
        inst=inst,
    )


def waits(coll: pl.DataFrame, inst: pl.DataFrame) -> pl.DataFrame:
    """`coll` with wait_ns: the instance's last start less the row's, clipped to 0 and to the
    row's duration; null where the instance has one rank."""
    idx = _dense_index(coll, inst)
    if idx is not None:  # a lookup in arrays of one slot per instance, no join
        at, last, ranks = idx
        start = coll["start_ns"].to_numpy()
        wait = np.minimum(coll["duration_ns"].to_numpy(), np.clip(last[at] - start, 0, None))
        got = pl.select(pl.when(pl.Series(ranks[at] >= 2)).then(pl.Series(wait)).alias("wait_ns"))
        return coll.with_columns(got.to_series().cast(pl.Int64))
    wide = [pl.col(c).cast(inst.schema[c]) for c in INST if coll.schema[c] != inst.schema[c]]
    o = coll.with_columns(wide).join(inst, on=INST, how="left", maintain_order="left")
    wait = pl.min_horizontal(pl.col("duration_ns"), (pl.col("_last") - pl.col("start_ns")).clip(0))
    return o.with_columns(pl.when(pl.col("_ranks") >= 2).then(wait).alias("wait_ns")).drop(
        "_last", "_ranks"
    )


def _dense_index(
    coll: pl.DataFrame, inst: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each row's slot in arrays of the instances' last start and rank count, indexed by
    cycle * (k's max + 1) + k; None where nulls or negatives or a sparse index rule it out."""
    cols = [coll["cycle"], coll["k"], coll["start_ns"], inst["cycle"], inst["k"]]
    if any(c.null_count() for c in cols):
        return None
    lo = min(int(c.min() or 0) for c in cols[:2] + cols[3:])  # type: ignore[arg-type]
    if lo < 0:
        return None
    nk = int(inst["k"].max()) + 1  # type: ignore[arg-type]
    size = (int(inst["cycle"].max()) + 1) * nk  # type: ignore[arg-type]
    if size > 4 * inst.height + 1024:
        return None
    slot = inst["cycle"].to_numpy().astype(np.int64) * nk + inst["k"].to_numpy()
    last = np.zeros(size, dtype=np.int64)
    ranks = np.zeros(size, dtype=np.int64)
    last[slot] = inst["_last"].to_numpy()
    ranks[slot] = inst["_ranks"].to_numpy()
    at = coll["cycle"].to_numpy().astype(np.int64) * nk + coll["k"].to_numpy()
    return at, last, ranks
