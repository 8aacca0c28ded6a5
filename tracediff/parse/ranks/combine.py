"""Many files of one run (one per rank, process or node) -> one `Run`.

Stage: parse (after each file's reader). Input: the files' `Run`s, in rank order, with the rank
each file's name says (ranknames.py); output: one `Run` whose tables hold every file's rows, as
one multi-process report would, so the engine cuts cycles per process and finds the critical GPU
per cycle across files exactly as within one file.

What the join decides:

- Clock. Each reader states its file's origin (`time_origin_utc_ns`: Kineto
  `baseTimeNanoseconds`, nsys session start). When every file has one, each file's times are
  shifted onto the earliest origin, so files of one host share its clock. When a file has none,
  its times cannot be placed: the files keep their own clocks and a warning says that timing
  across files (which GPU finished last, collective wait) is not meaningful. Files of different
  hosts (nsys `Hostname`) are then moved by each host's offset, estimated from collectives that
  must end together (clocks.py); the offsets and the residual skew are `metadata["clock_offsets"]`,
  and a host whose offset cannot be estimated is said in a warning.
- GPU identity (`metadata["gpus"]`, gpus.Gpu): each GPU is (host, process, device ordinal) with
  its rank: `distributedInfo` / NCCL rank first, else the file name's. Device ids are renumbered
  to the ranks when every GPU has a distinct one, kept when the files' ordinals are distinct,
  else numbered in file order.
- Processes: ids that repeat across files (containers, hosts) are offset by (file + 1) * 10^7.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracediff.parse import identity
from tracediff.parse.ranks import clocks
from tracediff.parse.ranks import gpus as gp
from tracediff.runs import schema
from tracediff.runs.runfile import Run

TIME_COLUMNS = (
    "start_ns",
    "end_ns",
    "launch_start_ns",
    "launch_end_ns",
    "api_start_ns",
    "api_end_ns",
    "completed_ns",
)
PID_STRIDE = 10_000_000
"""Above any Linux pid (pid_max <= 2^22)."""


@dataclass
class FileFacts:
    """What the join decides from, of one file: small, so a worker that read the file can send
    it (engine/pipeline/rankunit.py) and the driver decide without the file's tables."""

    path: str
    metadata: dict[str, Any]
    warnings: list[str]
    gpus: list[gp.Gpu]
    pids: set[int]
    ends: pl.DataFrame  # clocks.file_ends: the file's NCCL kernel ends, on its own clock


def facts_of(run: Run) -> FileFacts:
    pids: set[int] = set()
    for t in ("kernels", "api_calls"):
        col = pl.from_arrow(run.read(t, ["process_id"]))["process_id"]  # type: ignore[index]
        pids.update(col.drop_nulls().unique().to_list())
    return FileFacts(
        run.path,
        run.metadata,
        list(run.warnings),
        gp.gpus_of(run),
        pids,
        clocks.file_ends(run.read("collectives")),
    )


@dataclass
class Plan:
    """The join's decisions: per file its clock shift, process-id offset and device ids (file
    id -> joined id); the joined run's metadata and warnings."""

    shifts: list[int]
    pid_offsets: list[int]
    ids: list[dict[int, int]]
    metadata: dict[str, Any]
    warnings: list[str]


def plan(files: list[FileFacts], name_ranks: list[int | None], source: Path) -> Plan:
    """The decisions of `join` (the module docstring), from each file's facts."""
    warnings: list[str] = []
    for r in files:
        warnings += [w if str(r.path) in w else f"{Path(r.path).name}: {w}" for w in r.warnings]
    shifts, clock_note = clock_shifts(files)
    if clock_note:
        warnings.append(clock_note)
    per_file = [_file_gpus(r, name_ranks[i], warnings) for i, r in enumerate(files)]
    hosts = sorted({g.host for gs in per_file for g in gs if g.host is not None})
    est = None
    if len(hosts) > 1 and clock_note is None:  # one host: its tracer's clock, nothing to estimate
        est = clocks.estimate(
            [r.ends for r in files],
            [_host(r, gs) for r, gs in zip(files, per_file, strict=True)],
            shifts,
        )
        shifts = est.shifts
        if est.note:
            warnings.append(cross_host_warning(hosts) + ": " + est.note)
    elif len(hosts) > 1:
        warnings.append(cross_host_warning(hosts) + ": their offsets are not estimated")
    ids = _new_ids(per_file)
    pid_offset = _pid_offsets(files)
    gpus = [
        asdict(g) | {"device_id": ids[i][g.device_id], "process_id": _pid(g, pid_offset[i])}
        for i, gs in enumerate(per_file)
        for g in gs
    ]
    meta = _metadata(files, source, gpus, shifts, est)
    if est is not None:
        meta["clock_offsets"] = est.metadata(meta["clock"]) | {"estimated": True}
    return Plan(shifts, pid_offset, ids, meta, warnings)


def join(runs: list[Run], name_ranks: list[int | None], source: Path) -> Run:
    """One run from `runs` (see the module docstring). `name_ranks[i]`: the rank file i's name
    says, or None."""
    p = plan([facts_of(r) for r in runs], name_ranks, source)
    tables: dict[str, pa.Table] = {}
    for name in schema.TABLES:
        tables[name] = concat(name, [placed(r.table(name), name, p, i) for i, r in enumerate(runs)])
    return Run(tables=tables, metadata=p.metadata, warnings=p.warnings)


def placed(t: pa.Table, name: str, p: Plan, i: int) -> pa.Table:
    """File i's table `name` on the joined run's clock, process and device ids."""
    return shifted(t, name, p.shifts[i], p.pid_offsets[i], p.ids[i])


def clock_shifts(runs: list[FileFacts]) -> tuple[list[int], str | None]:
    """Per file, the ns added to its times to put it on the earliest file's clock; and a
    warning when the files cannot be put on one clock."""
    origins = [r.metadata.get("time_origin_utc_ns") for r in runs]
    known = [o for o in origins if isinstance(o, int)]
    if len(known) == len(origins):
        return [o - min(known) for o in known], None
    missing = [Path(r.path).name for r, o in zip(runs, origins, strict=True) if o is None]
    return [0] * len(runs), (
        f"{', '.join(missing)}: no time origin in the trace: each file keeps its own clock, so "
        "timing across files (the GPU that finished last, collective wait) is not meaningful"
    )


def cross_host_warning(hosts: list[str]) -> str:
    """The start of the warning for files of several hosts whose offsets are not all known."""
    return f"files from {len(hosts)} hosts ({', '.join(hosts)})"


def _host(run: FileFacts, gpus: list[gp.Gpu]) -> str | None:
    found = {g.host for g in gpus if g.host is not None}
    h = run.metadata.get("host")
    return found.pop() if len(found) == 1 else h if isinstance(h, str) else None


def _file_gpus(run: FileFacts, name_rank: int | None, warnings: list[str]) -> list[gp.Gpu]:
    out = []
    found = run.gpus
    for g in found:
        if g.rank is None and name_rank is not None and len(found) == 1:
            g = gp.Gpu(**(asdict(g) | {"rank": name_rank, "rank_from": "file name"}))
        elif g.rank is not None and name_rank is not None and g.rank != name_rank:
            warnings.append(
                f"{Path(run.path).name}: the name says rank {name_rank}, the trace "
                f"({g.rank_from}) rank {g.rank}: the trace's is used"
            )
        out.append(g)
    return out


def _new_ids(per_file: list[list[gp.Gpu]]) -> list[dict[int, int]]:
    """Per file, its device id -> the joined run's (the module docstring's rule)."""
    flat = [g for gs in per_file for g in gs]
    ranks = [g.rank for g in flat]
    if flat and None not in ranks and len(set(ranks)) == len(ranks):
        return [{g.device_id: int(g.rank) for g in gs} for gs in per_file]  # type: ignore[arg-type]
    ids = [g.device_id for g in flat]
    if len(set(ids)) == len(ids):
        return [{g.device_id: g.device_id for g in gs} for gs in per_file]
    out, n = [], 0
    for gs in per_file:
        out.append(
            {g.device_id: n + k for k, g in enumerate(sorted(gs, key=lambda g: g.device_id))}
        )
        n += len(gs)
    return out


def _pid_offsets(runs: list[FileFacts]) -> list[int]:
    seen: set[int] = set()
    clash = False
    for r in runs:
        clash |= bool(r.pids & seen)
        seen |= r.pids
    return [(i + 1) * PID_STRIDE if clash else 0 for i in range(len(runs))]


def _pid(g: gp.Gpu, offset: int) -> int | None:
    return None if g.process_id is None else g.process_id + offset


def shifted(t: pa.Table, name: str, shift: int, pid_offset: int, ids: dict[int, int]) -> pa.Table:
    """A file's table `name` on the joined run's clock, process and device ids."""
    if t.num_rows == 0:
        return t
    if name == "devices":  # the devices the file's process used (a trace lists all it sees)
        used = pa.array(list(ids), pa.int32())
        t = t.filter(pc.is_in(t.column("device_id"), value_set=used))
    times = [c for c in TIME_COLUMNS if c in t.column_names] if shift else []
    moves_pid = bool(pid_offset) and "process_id" in t.column_names
    if times or moves_pid:
        df = pl.from_arrow(t)
        assert isinstance(df, pl.DataFrame)
        exprs = [pl.col(c) + shift for c in times]
        exprs += [pl.col("process_id") + pid_offset] if moves_pid else []
        t = df.with_columns(exprs).to_arrow()
    out = t
    if ids and any(k != v for k, v in ids.items()):
        out = gp.relabel_table(out, ids)
    return schema.conform(name, out)


def concat(name: str, parts: list[pa.Table]) -> pa.Table:
    """The files' tables `name` (each `shifted`) as the joined run's."""
    parts = [t for t in parts if t.num_rows] or parts[:1]
    t = pa.concat_tables(parts)
    if name in ("frames", "stacks"):  # ids are content hashes: the same frame in every file
        df = pl.from_arrow(t)
        assert isinstance(df, pl.DataFrame)
        key = ["frame_id"] if name == "frames" else ["stack_id", "depth"]
        t = schema.conform(name, df.unique(key, keep="first", maintain_order=True).to_arrow())
    return t.unify_dictionaries()  # one dictionary per column (IPC files allow no other)


def _metadata(
    runs: list[FileFacts],
    source: Path,
    gpus: list[dict[str, Any]],
    shifts: list[int],
    est: clocks.ClockEstimate | None,
) -> dict[str, Any]:
    first = runs[0].metadata
    formats = {r.metadata.get("source_format") for r in runs}
    origins = [r.metadata.get("time_origin_utc_ns") for r in runs]
    keep = {k: v for k, v in first.items() if k not in ("source", "rank", "device_id_map", "label")}
    idents = [identity.of_metadata(r.metadata) for r in runs]
    return keep | {
        "identity": identity.combine([i for i in idents if i], shifts) if all(idents) else None,
        "source": str(source),
        "source_format": formats.pop() if len(formats) == 1 else "mixed",
        "label": source.stem if source.is_file() else source.name,
        "files": [
            {
                "source": r.metadata.get("source"),
                "rank": r.metadata.get("rank"),
                "time_origin_utc_ns": r.metadata.get("time_origin_utc_ns"),
                "clock_shift_ns": shifts[i],
            }
            for i, r in enumerate(runs)
        ],
        "gpus": gpus,
        "time_origin_utc_ns": min(origins) if all(isinstance(o, int) for o in origins) else None,  # type: ignore[type-var]
        "clock": clocks.describe(est)
        if est is not None
        else "one clock: each file's time origin"
        if all(isinstance(o, int) for o in origins)
        else "each file its own clock",
    }
