"""Putting the files of one run on one clock: each host's offset estimated from collectives.

Stage: parse (inside combine.py, after each file is placed by its tracer's time origin). Input: the
files' collectives tables, the host each file came from and the shift its origin gives; output:
a `ClockEstimate` (per-file ns to add, what was estimated, the residual skew) for the join and
the run's metadata (`metadata["clock"]`).

The rule (README "One run from many files"):

- Files of one host share its clock as far as their tracers say (Kineto `baseTimeNanoseconds`,
  nsys session start time): nothing is estimated between them.
- Files of different hosts (the nsys `Hostname`) do not: an NCCL collective ends at about the same
  time on every rank of its communicator (after the last rank arrives, the transfer completes on
  all of them together), so per instance the gap between two hosts' end times is their clock
  offset. Each host's offset from the reference host (the host of the first file, rank order) is
  the median over every instance the two share of (reference host's median end - this host's
  median end); the median makes it robust to the odd mismatched or late-reported instance.
- An instance is the k-th kernel of one name on each GPU, within a communicator where the trace
  names one (`comm_id`); it is used only when every GPU that should take part has it (the
  communicator's `group_size`, else every GPU of the run) and each GPU has as many kernels of that
  name, since otherwise the k-th kernels need not be the same collective.
- The residual skew is the spread (latest - earliest GPU) of an instance's end times once the
  offsets are applied, summarised over instances (median, 95th percentile, max): how far cross-GPU
  timing (which GPU finished last, the wait for the last rank) can be trusted. The engine refuses
  the collective wait/transfer split where it is larger than the wait it would measure.
- Hosts that share no usable instance keep their own clock, and `note` says so (a warning on the
  run): their offset is unknown, not zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

MIN_INSTANCES = 3
"""Fewer shared instances than this estimate nothing (a median of one or two is no estimate)."""


@dataclass
class ClockEstimate:
    """shifts: per file, the ns the join adds to its times (tracer origin + host offset).
    hosts: per host {host, offset_ns (None: unknown), instances, spread_ns (MAD of the
    per-instance offsets)}; skew_*: the residual spread of collective ends after correction
    (None: no instance); note: a warning, when something could not be estimated."""

    shifts: list[int]
    hosts: list[dict[str, Any]] = field(default_factory=list)
    instances: int = 0
    skew_median_ns: int | None = None
    skew_p95_ns: int | None = None
    skew_max_ns: int | None = None
    skew_before_median_ns: int | None = None
    note: str | None = None

    def metadata(self, base: str) -> dict[str, Any]:
        """The `metadata["clock"]` record: `base` says how files were placed before this."""
        return {
            "rule": base,
            "hosts": self.hosts,
            "collective_instances": self.instances,
            "residual_skew_ns": {
                "median": self.skew_median_ns,
                "p95": self.skew_p95_ns,
                "max": self.skew_max_ns,
            },
            "skew_before_correction_median_ns": self.skew_before_median_ns,
            "note": self.note,
        }


def file_ends(t: pa.Table) -> pl.DataFrame:
    """gpu (file-local device id), name, comm_id ("" where the trace names none), group_size,
    end (on the file's own clock) of every NCCL kernel of one file's collectives table (small:
    what a worker sends). name and comm_id are categoricals: the table's name dictionary kept
    as it is, the few communicator ids coded once, so no string is built per row here or when
    `instances` keys them."""
    df = pl.from_arrow(t.select(["source", "device_id", "name", "comm_id", "group_size", "end_ns"]))
    assert isinstance(df, pl.DataFrame)
    return df.filter((pl.col("source") == "kernel") & pl.col("end_ns").is_not_null()).select(
        pl.col("device_id").fill_null(-1).cast(pl.Int32).alias("gpu"),
        pl.col("name").cast(pl.Categorical),
        pl.col("comm_id").cast(pl.Categorical).fill_null(""),
        pl.col("group_size").cast(pl.Int32),
        pl.col("end_ns").alias("end"),
    )


def collective_ends(ends: list[pl.DataFrame], shifts: list[int]) -> pl.DataFrame:
    """file, gpu, name, comm, group_size, end (on the origins' clock) of every NCCL kernel of
    every file (each file's `file_ends`)."""
    parts = [_placed(e, i, shifts[i]) for i, e in enumerate(ends)]
    return pl.concat(parts) if parts else pl.DataFrame()


def _placed(ends: pl.DataFrame, i: int, shift: int) -> pl.DataFrame:
    return ends.select(
        pl.lit(i, pl.Int32).alias("file"),
        "gpu",
        "name",
        "comm_id",
        "group_size",
        (pl.col("end") + shift).alias("end"),
    )


CHUNK_ROWS = 500_000
"""`estimate` keys the instances of this many NCCL kernels at a time (whole files: ~18 MB keyed;
a query per file cost ~1 ms each, 1.2 s at 512 files)."""


def _each_placed(ends: list[pl.DataFrame], shifts: list[int]) -> Iterator[pl.DataFrame]:
    """collective_ends' frame in chunks of whole files of about CHUNK_ROWS rows."""
    part: list[pl.DataFrame] = []
    rows = 0
    for i, e in enumerate(ends):
        part.append(_placed(e, i, shifts[i]))
        rows += e.height
        if rows >= CHUNK_ROWS:
            yield pl.concat(part)
            part, rows = [], 0
    if part:
        yield pl.concat(part)


Chunks = Callable[[], Iterator[pl.DataFrame]]


def instances(ends: pl.DataFrame | Chunks) -> pl.DataFrame:
    """instance id, file, gpu, end: the collective instances every member GPU has (module
    docstring), one row per instance and GPU. Keys are integers: a (communicator, name) pair is
    its two categorical codes packed in 64 bits (no string built per row: the codes are
    file_ends' categoricals, or one cast of a string column), the kept pairs are numbered 0..n-1
    and the instance id is that number << 32 | k. A null comm_id or name keys no instance
    (file_ends has made a missing comm_id ""). `ends`: collective_ends' frame, or a function
    giving it in chunks of whole files in file order (each read twice, one at a time: of 3 M
    rows, no keyed copy of them all; the same answer)."""
    chunks = ends if callable(ends) else partial(iter, [ends])
    empty = {"inst": pl.Int64, "file": pl.Int32, "gpu": pl.Int32, "end": pl.Int64}
    total, parts = 0, []
    for c in chunks():
        e = _keyed(c)
        total += e["fg"].n_unique()
        parts.append(
            e.group_by("pair", "fg").agg(
                pl.len().alias("n"), pl.col("group_size").max().alias("gs")
            )
        )
    if not total:
        return pl.DataFrame(schema=empty)
    counts = pl.concat(parts)
    # per (comm, name): every GPU that has one has as many, and the members are the group
    # (group_size where named, else every GPU of the run)
    good = (
        counts.group_by("pair")
        .agg(
            pl.col("n").n_unique().alias("_counts"),
            pl.len().alias("_members"),
            pl.col("gs").max().alias("_gs"),
        )
        .filter(
            (pl.col("_counts") == 1)
            & (pl.col("_members") == pl.col("_gs").fill_null(total))
            & (pl.col("_members") >= 2)
            & pl.col("pair").is_not_null()
        )
        .sort("pair")["pair"]  # (numbered in code order, not group_by's: the same ids each time)
    )
    cn = pl.col("pair").replace_strict(good, range(len(good)), return_dtype=pl.Int64)
    out = []
    for c in chunks():
        e = _keyed(c).filter(pl.col("pair").is_in(good.implode())).sort("fg", "pair", "end")
        if e.height == 0:
            continue
        # rows are sorted by (fg, pair): k is the row's place within its run of equal keys
        fg, pair = e["fg"].to_numpy(), e["pair"].to_numpy()
        first = np.r_[0, np.flatnonzero((fg[1:] != fg[:-1]) | (pair[1:] != pair[:-1])) + 1]
        k = np.arange(len(fg)) - np.repeat(first, np.diff(np.r_[first, len(fg)]))
        out.append(e.select((cn * (1 << 32) + pl.Series(k)).alias("inst"), "file", "gpu", "end"))
    return pl.concat(out) if out else pl.DataFrame(schema=empty)


def _keyed(ends: pl.DataFrame) -> pl.DataFrame:
    return ends.select(
        "file",
        "gpu",
        "end",
        "group_size",
        (_code("comm_id") * (1 << 32) + _code("name")).alias("pair"),
        (pl.col("file").cast(pl.Int64) * 65_536 + pl.col("gpu").cast(pl.Int64) + 32_768).alias(
            "fg"
        ),
    )


def _code(col: str) -> pl.Expr:
    """`col`'s categorical code as UInt64 (a cast only where the column is still strings)."""
    return pl.col(col).cast(pl.Categorical).to_physical().cast(pl.UInt64)


def host_medians(inst: pl.DataFrame) -> pl.DataFrame:
    """inst, h, end: each instance's median end time on each host (the lower middle of an even
    count), by one sort (a group-by median is several times slower on 0.6 M rows)."""
    srt = inst.select("inst", "h", "end").sort("inst", "h", "end")
    i, h = srt["inst"].to_numpy(), srt["h"].to_numpy()
    first = np.r_[0, np.flatnonzero((i[1:] != i[:-1]) | (h[1:] != h[:-1])) + 1]
    size = np.diff(np.r_[first, len(i)])
    return srt.select(pl.all().gather(first + (size - 1) // 2))


def estimate(
    colls: list[pl.DataFrame], hosts: list[str | None], origin_shifts: list[int]
) -> ClockEstimate:
    """Each host's offset and the residual skew (the module docstring's rule). `colls[i]`: file
    i's `file_ends`; `hosts[i]`: file
    i's host (None: not said; such files are taken to be on the first file's host's clock)."""
    n = len(colls)
    group = [h if h is not None else (hosts[0] or "") for h in hosts]
    names = list(dict.fromkeys(group))
    host_of = [names.index(g) for g in group]
    est = ClockEstimate(shifts=list(origin_shifts))
    inst = instances(partial(_each_placed, colls, origin_shifts)) if n else pl.DataFrame()
    offsets: list[int | None] = [0] + [None] * (len(names) - 1)
    spread: list[int | None] = [0] + [None] * (len(names) - 1)
    shared = [0] * len(names)
    if inst.height:
        inst = inst.with_columns(
            pl.col("file").replace_strict(list(range(n)), host_of, return_dtype=pl.Int32).alias("h")
        )
        est.instances = int(inst["inst"].n_unique())
        wide = host_medians(inst).pivot(on="h", index="inst", values="end")
        shared[0] = est.instances
        for h in range(1, len(names)):
            if str(h) not in wide.columns:
                continue
            both = wide.select("0", str(h)).drop_nulls()
            shared[h] = both.height
            if both.height < MIN_INSTANCES:
                continue
            d = (both["0"] - both[str(h)]).to_numpy().astype(np.float64)
            med = float(np.median(d))
            offsets[h] = int(round(med))
            spread[h] = int(round(float(np.median(np.abs(d - med)))))
    est.hosts = [
        {
            "host": name or None,
            "offset_ns": offsets[h],
            "instances": shared[h],
            "offset_spread_ns": spread[h],
            "reference": h == 0,
        }
        for h, name in enumerate(names)
    ]
    est.shifts = [origin_shifts[i] + (offsets[host_of[i]] or 0) for i in range(n)]
    if inst.height:
        add = pl.col("h").replace_strict(
            list(range(len(names))), [o or 0 for o in offsets], return_dtype=pl.Int64
        )
        s = (
            inst.select("inst", "end", (pl.col("end") + add).alias("c"))
            .group_by("inst")
            .agg(
                (pl.col("c").max() - pl.col("c").min()).alias("after"),
                (pl.col("end").max() - pl.col("end").min()).alias("before"),
            )
        )
        a = s["after"].to_numpy()
        est.skew_median_ns = int(np.median(a))
        est.skew_p95_ns = int(np.percentile(a, 95))
        est.skew_max_ns = int(a.max())
        est.skew_before_median_ns = int(np.median(s["before"].to_numpy()))
    unknown = [names[h] or "?" for h in range(1, len(names)) if offsets[h] is None]
    if unknown:
        est.note = (
            f"the clock offset of host {', '.join(unknown)} (vs {names[0] or 'the first file'}) "
            f"cannot be estimated: fewer than {MIN_INSTANCES} NCCL collectives that every rank "
            "took part in; it keeps its own clock (the offset is unknown, not zero), so timing "
            "across hosts (the GPU that finished last, collective wait) is not meaningful and "
            "the collective wait/transfer split is not made"
        )
    return est


def describe(est: ClockEstimate) -> str:
    """The run's `clock` line for files of several hosts."""
    known = [h for h in est.hosts if h["offset_ns"] is not None]
    if not est.hosts:
        return "one clock: each file's time origin"
    if len(known) < len(est.hosts):
        return (
            "each file's time origin; hosts' offsets not all estimated: "
            + ", ".join(str(h["host"]) for h in est.hosts if h["offset_ns"] is None)
            + " on its own clock"
        )
    offs = ", ".join(f"{h['host']} {h['offset_ns'] / 1e6:+.3f} ms" for h in known[1:])
    skew = est.skew_median_ns or 0
    return (
        f"each file's time origin + host offsets from {est.instances} collectives "
        f"({offs} vs {known[0]['host']}); residual skew {skew / 1e3:.1f} us median, "
        f"{(est.skew_p95_ns or 0) / 1e3:.1f} us p95"
    )
