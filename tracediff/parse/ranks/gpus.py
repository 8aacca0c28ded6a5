"""Which GPU is which: each GPU of a run as (host, process, device) with its rank, and the
matching of one run's GPUs to another's.

Stage: parse (after `load`, before the engine). Input: `Run`s; output: `Gpu` identities, a
`DeviceMatch` (head GPU -> base GPU) and runs relabelled so that matched GPUs share a
`device_id` (the engine keys every per-GPU row by device_id alone).

Identity. A joined run (combine.py) lists its GPUs in `metadata["gpus"]`. A run read from one file
is described from its tables: the devices its kernels, copies and collectives ran on, the process
that used each, and a rank where the trace says it: Kineto's `distributedInfo.rank` or the RANK
(LOCAL_RANK, MPI launchers' rank) in an nsys report's session environment (a trace with one GPU:
the readers' `rank`, `rank_from`), else the NCCL communicator rank its collectives carry (one
rank per device).

Matching (`match`), in this order: `--device-map` pairs as given; by rank when both sides know
every GPU's rank and the ranks are the same set; by device id when both sides have the same ids;
by order (rank, then device id) when the counts agree but nothing else does: a guess, said in a
warning. Otherwise GPUs with the same id (or rank) are matched and the rest are left unmatched
(their ops read as added / removed), with a warning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.base.errors import UsageError
from tracediff.runs.runfile import Run

DEVICE_TABLES = (
    "kernels",
    "memops",
    "collectives",
    "nvtx_ranges",
    "devices",
    "syncs",
    "cuda_events",
)
"""The run tables with a device_id column."""
_USED = ("kernels", "memops", "collectives")
_SPAN = 1 << 16
"""Device ids spread wider than this (none a tracer writes): `used_devices` by polars' plan."""
_SMALL = 100_000
"""GPU records up to this many: `used_devices` by numpy (a plan costs ~2 ms whatever the size;
numpy's passes over float copies cost more than the plan at ~1 M records: 50 against 22 ms)."""
_RANK = {"collectives": ["rank"]}


@dataclass(frozen=True)
class Gpu:
    """One GPU of a run. device_id: its id in the run's tables; ordinal: the device index the
    tracer reported (before a join renumbered it); rank_from: which record said the rank
    ("distributedInfo", "nccl", "file name"); None fields are unknown."""

    device_id: int
    rank: int | None = None
    rank_from: str | None = None
    process_id: int | None = None
    ordinal: int | None = None
    host: str | None = None
    file: str | None = None

    def describe(self) -> str:
        r = f" (rank {self.rank})" if self.rank is not None else ""
        return f"GPU {self.device_id}{r}"


def used_devices(run: Run) -> pl.DataFrame:
    """device_id, process_id (the process with most ops on it), rank (the NCCL rank its
    collectives carry, when one), one row per device with GPU work. Kept with the run's record
    counts (`Run.record_counts[KEPT]`) once found, so a run file written from the run carries
    them and reading it back does not decode its ops' device and process columns again (a
    5 M-kernel run file: ~0.2 CPU-s)."""
    kept = _kept(run.record_counts)
    if kept is not None:
        return kept
    got = _used(run)
    if isinstance(run.record_counts, dict):  # what the run's checked tables hold
        run.record_counts[KEPT] = [list(row) for row in got.iter_rows()]
    return got


KEPT = "used_devices"
"""The key of `used_devices`' rows in `Run.record_counts`: [device_id, process_id, rank]."""


def _kept(counts: Any) -> pl.DataFrame | None:
    """`used_devices` as kept in `counts`; None where not kept or not whole (found again)."""
    rows = counts.get(KEPT) if isinstance(counts, dict) else None
    if not isinstance(rows, list):
        return None
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3 and type(row[0]) is int):
            return None
        if not all(v is None or type(v) is int for v in row[1:]):
            return None
    return pl.DataFrame(rows, schema=_SCHEMA, orient="row")


_SCHEMA = {"device_id": pl.Int32, "process_id": pl.Int64, "rank": pl.Int32}


def _used(run: Run) -> pl.DataFrame:
    """`used_devices` from the run's tables. Ops of one process (the usual rank file) of a small
    run: by numpy, a table over the device ids (a demo run file's 3 -> 0.4 ms: the cost was
    polars' plan, its concat, group-by and list of ranks, not the data); several processes, or
    more than `_SMALL` records: `_by_plan`, that plan."""
    tabs = {t: run.read(t, ["device_id", "process_id", *_RANK.get(t, [])]) for t in _USED}
    if sum(tab.num_rows for tab in tabs.values()) > _SMALL:
        return _by_plan(tabs)
    cols: dict[str, list[np.ndarray]] = {"device_id": [], "process_id": [], "rank": []}
    for tab in tabs.values():
        for c, arrays in cols.items():  # ids as float64, null as NaN (exact: ids < 2**53)
            arrays.append(
                tab.column(c).to_numpy().astype(np.float64)
                if c in tab.column_names
                else np.full(tab.num_rows, np.nan)
            )
    dev, pid, rank = (np.concatenate(v) for v in cols.values())
    on = ~np.isnan(dev)
    dev, pid, rank = dev[on].astype(np.int64), pid[on], rank[on]
    known = pid[~np.isnan(pid)]
    if len(dev) == 0:
        return pl.DataFrame(schema=_SCHEMA)
    base = int(dev.min())
    span = int(dev.max()) - base + 1
    if (len(known) and known.min() != known.max()) or span > _SPAN:
        return _by_plan(tabs)
    dev -= base  # each op's slot in a table over the devices' range (no sort, no hash)
    devices = np.flatnonzero(np.bincount(dev, minlength=span))
    # one process: a device's is it where any of its ops names it (a max over its ops)
    named = np.bincount(dev[~np.isnan(pid)], minlength=span)[devices] > 0
    pids = np.where(named, known[0] if len(known) else np.nan, np.nan)
    # the one rank its collectives carry; none or several: unknown
    has = ~np.isnan(rank)
    lo, hi = np.full(span, np.inf), np.full(span, -np.inf)
    np.minimum.at(lo, dev[has], rank[has])
    np.maximum.at(hi, dev[has], rank[has])
    lo, hi = lo[devices], hi[devices]
    return pl.DataFrame(
        [
            pl.Series("device_id", devices + base).cast(pl.Int32),
            pl.Series("process_id", pids, nan_to_null=True).cast(pl.Int64),
            pl.Series("rank", np.where(lo == hi, lo, np.nan), nan_to_null=True).cast(pl.Int32),
        ]
    )


def _by_plan(tabs: dict[str, pa.Table]) -> pl.DataFrame:
    """`used_devices` of the tables read (`tabs`) by one polars plan: each device's op count per
    process (a two-integer group-by; its most frequent process, ties the lowest id, as
    `mode().min()` gives, without a hash of each op's id into a list per device), and the ranks
    from the tables that carry one (the collectives), not from every op (5 M-kernel 8-GPU
    run: 0.21 -> ~0.06 CPU-s a side)."""
    ops, ranked = [], []
    for tab in tabs.values():
        df = pl.from_arrow(tab)
        assert isinstance(df, pl.DataFrame)
        lazy = df.lazy().filter(pl.col("device_id").is_not_null())
        ops.append(lazy.select("device_id", "process_id"))
        if "rank" in df.columns:
            ranked.append(lazy.select("device_id", "rank"))
    per = (
        pl.concat(ops, how="vertical_relaxed")
        .group_by("device_id", "process_id")
        .agg(pl.len().alias("_n"))
    )
    most = (
        per.filter(pl.col("process_id").is_not_null())
        .sort("device_id", pl.col("_n"), "process_id", descending=[False, True, False])
        .group_by("device_id", maintain_order=True)
        .agg(pl.col("process_id").first())
    )
    devices = per.select("device_id").unique()
    got = devices.join(most, on="device_id", how="left")
    if ranked:
        ranks = (
            pl.concat(ranked, how="vertical_relaxed")
            .filter(pl.col("rank").is_not_null())
            .group_by("device_id")
            .agg(pl.col("rank").unique().alias("_ranks"))
        )
        one = pl.when(pl.col("_ranks").list.len() == 1).then(pl.col("_ranks").list.first())
        got = got.join(ranks, on="device_id", how="left").with_columns(
            one.otherwise(None).cast(pl.Int32).alias("rank")
        )
    else:
        got = got.with_columns(pl.lit(None, pl.Int32).alias("rank"))
    out = got.select("device_id", "process_id", "rank").sort("device_id").collect()
    if out.height == 0:
        return pl.DataFrame(schema=_SCHEMA)
    return out


def gpus_of(run: Run) -> list[Gpu]:
    """The run's GPUs (the module docstring says from what)."""
    listed = run.metadata.get("gpus")
    if isinstance(listed, list) and listed:
        return [Gpu(**g) for g in listed]
    used = used_devices(run)
    meta_rank = run.metadata.get("rank")
    one = used.height == 1 and isinstance(meta_rank, int)
    out = []
    for r in used.iter_rows(named=True):
        rfrom_meta = run.metadata.get("rank_from") or "distributedInfo"
        rank, rfrom = (meta_rank, rfrom_meta) if one else (r["rank"], "nccl")
        out.append(
            Gpu(
                device_id=int(r["device_id"]),
                rank=rank,
                rank_from=rfrom if rank is not None else None,
                process_id=r["process_id"],
                ordinal=int(r["device_id"]),
                host=run.metadata.get("host"),
                file=run.metadata.get("source"),
            )
        )
    return out


@dataclass(frozen=True)
class DeviceMatch:
    """How the other run's GPUs map onto the reference run's: `pairs` (ref, other; None on the
    side that lacks one), `by` ("given", "rank", "device", "order"), `guessed` (by order: nothing
    in the traces says these GPUs correspond) and the warning to show, if any."""

    pairs: tuple[tuple[Gpu | None, Gpu | None], ...]
    by: str
    guessed: bool
    warning: str | None

    @property
    def mapping(self) -> dict[int, int]:
        """other device_id -> reference device_id, for the matched pairs."""
        return {o.device_id: r.device_id for r, o in self.pairs if r is not None and o is not None}

    def is_identity(self) -> bool:
        return all(o is None or r is None or o.device_id == r.device_id for r, o in self.pairs)

    def rows(self) -> list[dict[str, Any]]:
        """For JSON: one entry per pair, `base` / `head` each the GPU's identity or null."""
        return [
            {
                "base": asdict(r) if r is not None else None,
                "head": asdict(o) if o is not None else None,
                "by": self.by,
                "guessed": self.guessed,
            }
            for r, o in self.pairs
        ]


def parse_device_map(text: str) -> dict[int, int]:
    """`--device-map BASE=HEAD[,BASE=HEAD...]` -> {head id: base id}."""
    out: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        b, sep, h = part.partition("=")
        if not sep or not b.strip().isdigit() or not h.strip().isdigit():
            raise UsageError(
                f"--device-map {text}: {part!r} is not BASE=HEAD (two GPU ids, e.g. 3=1)"
            )
        if int(h) in out or int(b) in out.values():
            raise UsageError(f"--device-map {text}: GPU {part} is paired twice")
        out[int(h)] = int(b)
    if not out:
        raise UsageError(f"--device-map {text!r}: give BASE=HEAD pairs, e.g. 3=1")
    return out


def match(ref: list[Gpu], other: list[Gpu], given: dict[int, int] | None = None) -> DeviceMatch:
    """Pair `other`'s GPUs with `ref`'s (the rule in the module docstring)."""
    if given is not None:
        return _given(ref, other, given)
    rr, ro = [g.rank for g in ref], [g.rank for g in other]
    if None not in rr and None not in ro and len(set(rr)) == len(rr) and set(rr) == set(ro):
        by_rank = {g.rank: g for g in other}
        return DeviceMatch(tuple((g, by_rank[g.rank]) for g in ref), "rank", False, None)
    ids_r, ids_o = {g.device_id for g in ref}, {g.device_id for g in other}
    if ids_r == ids_o:
        by_id = {g.device_id: g for g in other}
        return DeviceMatch(tuple((g, by_id[g.device_id]) for g in ref), "device", False, None)
    if len(ref) == len(other):
        key = lambda g: (g.rank if g.rank is not None else -1, g.device_id)  # noqa: E731
        pairs = tuple(zip(sorted(ref, key=key), sorted(other, key=key), strict=True))
        said = ", ".join(f"{r.describe()} = {o.describe()}" for r, o in pairs)
        return DeviceMatch(
            pairs,
            "order",
            True,
            f"GPUs matched by order, nothing in the traces says they correspond: base {said} "
            "of head (give --device-map BASE=HEAD to say otherwise)",
        )
    by_id = {g.device_id: g for g in other}
    pairs_l: list[tuple[Gpu | None, Gpu | None]] = [(g, by_id.pop(g.device_id, None)) for g in ref]
    pairs_l += [(None, g) for g in by_id.values()]
    return DeviceMatch(
        tuple(pairs_l),
        "device",
        False,
        f"base has {len(ref)} GPU(s), head {len(other)}: GPUs matched by id where both have it, "
        "the others' work reads as removed / added (give --device-map BASE=HEAD to pair them)",
    )


def _given(ref: list[Gpu], other: list[Gpu], given: dict[int, int]) -> DeviceMatch:
    ids_r = {g.device_id: g for g in ref}
    ids_o = {g.device_id: g for g in other}
    for h, b in given.items():
        for side, ids, d in (("base", ids_r, b), ("head", ids_o, h)):
            if d not in ids:
                raise UsageError(
                    f"--device-map {b}={h}: the {side} run has no GPU {d} "
                    f"(it has {', '.join(map(str, sorted(ids))) or 'none'})"
                )
    pairs: list[tuple[Gpu | None, Gpu | None]] = [(ids_r[b], ids_o[h]) for h, b in given.items()]
    left_r = [g for g in ref if g.device_id not in given.values()]
    left_o = {g.device_id: g for g in other if g.device_id not in given}
    pairs += [(g, left_o.pop(g.device_id, None)) for g in left_r]
    pairs += [(None, g) for g in left_o.values()]
    return DeviceMatch(tuple(pairs), "given", False, None)


def relabel(run: Run, m: DeviceMatch) -> Run:
    """`run` (the `other` of `m`) with its device ids replaced by the reference's; its unmatched
    GPUs get ids the reference does not use. The run is returned unchanged for an identity."""
    if m.is_identity():
        return run
    mapping = relabel_mapping(m)
    tables = {
        name: (
            relabel_table(run.table(name), mapping) if name in DEVICE_TABLES else run.table(name)
        )
        for name in run.tables
    }
    meta = relabelled_metadata(run.metadata, m, mapping)
    return Run(tables=tables, metadata=meta, warnings=list(run.warnings), checksums=run.checksums)


def relabel_mapping(m: DeviceMatch) -> dict[int, int]:
    """Other device id -> the id `relabel` gives it (`relabel`'s rule)."""
    mapping = m.mapping
    taken = {r.device_id for r, _ in m.pairs if r is not None}
    fresh = max([*taken, *(o.device_id for _, o in m.pairs if o is not None)], default=-1) + 1
    for _, o in m.pairs:
        if o is not None and o.device_id not in mapping:
            if o.device_id in taken:
                mapping[o.device_id], fresh = fresh, fresh + 1
            else:
                mapping[o.device_id] = o.device_id
    return mapping


def relabelled_metadata(
    metadata: dict[str, Any], m: DeviceMatch, mapping: dict[int, int]
) -> dict[str, Any]:
    """A relabelled run's metadata: its GPUs under their new ids, and the mapping."""
    gpus = [{**asdict(o), "device_id": mapping[o.device_id]} for _, o in m.pairs if o is not None]
    return {**metadata, "gpus": gpus, "device_relabel": {str(k): v for k, v in mapping.items()}}


def relabel_table(t: pa.Table, mapping: dict[int, int]) -> pa.Table:
    """device_id replaced through `mapping` (ids not in it kept), the column's type kept."""
    if "device_id" not in t.column_names or t.num_rows == 0:
        return t
    i = t.column_names.index("device_id")
    col = pl.from_arrow(t.column(i))
    assert isinstance(col, pl.Series)
    keys = list(mapping)
    new = col.replace(keys, [mapping[k] for k in keys]).cast(col.dtype)
    return t.set_column(i, t.field(i), new.to_arrow().cast(t.field(i).type))


def align_sides(
    bases: list[Any],
    heads: list[Any],
    given: dict[int, int] | None = None,
    ref: list[Gpu] | None = None,
) -> tuple[list[Any], list[Any], DeviceMatch]:
    """Every run's GPUs matched to base's first run's and relabelled onto its ids (the other
    base runs automatically, head's by `given` when set); the match of head's first run. A
    guessed or partial match's warning is added to that run's warnings. `ref`: base's first
    run's `gpus_of`, where known (engine/inputs.py takes it before letting its tables go)."""
    ref = gpus_of(bases[0]) if ref is None else ref
    out_b = [bases[0]]
    for r in bases[1:]:
        out_b.append(_aligned(r, match(ref, gpus_of(r))))
    out_h, first = [], None
    for r in heads:
        m = match(ref, gpus_of(r), given)
        first = first or m
        out_h.append(_aligned(r, m))
    assert first is not None
    return out_b, out_h, first


def _aligned(run: Any, m: DeviceMatch) -> Any:
    """`relabel`; a run of rank files not read here (engine/pipeline/rankrun.py) relabels its own."""
    out = relabel(run, m) if isinstance(run, Run) else run.relabelled(m)
    if m.warning:
        out.warnings.append(m.warning)
    return out
