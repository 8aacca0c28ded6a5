"""Nsight Systems export (SQLite file or Parquet folder) → run-file tables.

Stage: parse. Input: an nsys export, schema 2.9 (nsys 2022.2) through 3.28 (2026.x), read through
a `Source` (`source.SqliteSource`, or `ParquetSource` in cli.py: same tables and
columns, one `<TABLE>.parquet` per table). Output: a `Run` with the tables of `tracediff.runs.schema`.

`read_nsys` is the entry point of the nsys reader; the package docstring lists its parts.

Features are detected by table and column presence, never by version string. No Python loop
runs per event. Missing optional tables give empty tables plus a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from tracediff.base.errors import InputError
from tracediff.parse import nccl
from tracediff.parse.intervals import nesting_depth
from tracediff.parse.nsys import events, graph_nodes
from tracediff.parse.nsys.columns import Strings
from tracediff.parse.nsys.nvtx import nvtx_table
from tracediff.parse.nsys.schema import (
    API_LATER,
    COPY_KINDS,
    ENUM_COLS,
    GPU,
    GPU_COLS,
    I64,
    KERNEL,
    KERNEL_COLS,
    KERNEL_LATER,
    KNOWN_SCHEMA_MAJOR,
    MEM_KINDS,
    MEMCPY,
    MEMCPY_COLS,
    MEMSET,
    MEMSET_COLS,
    META_TABLES,
    NAME_VALUE,
    NVTX,
    NVTX_COLS,
    NVTX_DOMAIN,
    NVTX_MARK,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    PAYLOAD_COLS,
    PAYLOAD_ENTRIES,
    RUNTIME,
    RUNTIME_COLS,
    STR,
    STRINGS,
    SYNC,
    SYNC_COLS,
    ints,
)
from tracediff.parse.nsys.source import Read, Source, SqliteSource, typed
from tracediff.parse.nsys.stacks import add_stacks
from tracediff.parse.nsys.tables import (
    api_calls_table,
    devices_table,
    enum_labels,
    kernels_table,
    launch_keys,
    memops_table,
    short_copy_kinds,
    syncs_table,
)
from tracediff.runs.arrowcols import narrow, series
from tracediff.runs.deferred import Build, Deferred
from tracediff.runs.runfile import Run

# re-exported: callers import these from here (nesting_depth: the Kineto reader)
__all__ = [
    "TABLES_READ", "Read", "Source", "SqliteSource", "is_nsys", "nesting_depth", "read_nsys",
    "read_nsys_sqlite", "typed",
]  # fmt: skip


def read_nsys(source: Source, path: Path, source_format: str) -> Run:
    """Read every table of an nsys export from `source` into a Run."""
    have = source.tables
    warnings = _checked(have, path)
    meta_table = next((t for t in META_TABLES if t in have), META_TABLES[0])
    nvtx_types = (NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN)
    node_table = graph_nodes.node_table(have, source.columns)
    reads = [
        Read(meta_table, NAME_VALUE), Read(STRINGS, {"id": I64, "value": STR}),
        Read("TARGET_INFO_SESSION_START_TIME", ints("utcEpochNs")),
        Read("ENUM_CUDA_MEMCPY_OPER", ENUM_COLS), Read("ENUM_CUDA_MEM_KIND", ENUM_COLS),
        Read(PAYLOAD_ENTRIES, PAYLOAD_COLS), Read(GPU, GPU_COLS),
        Read(KERNEL, KERNEL_COLS), Read(RUNTIME, RUNTIME_COLS), Read(MEMCPY, MEMCPY_COLS),
        Read(MEMSET, MEMSET_COLS), Read(SYNC, SYNC_COLS | events.SYNC_COLS),
        Read(NVTX, NVTX_COLS, ("eventType", nvtx_types)),
        Read(events.CUDA_EVENT, events.EVENT_COLS),
        Read(SYSTEM_ENV, {"name": STR, "value": STR}),
        Read(node_table or graph_nodes.NODE_EVENTS, graph_nodes.NODE_COLS),
    ]  # fmt: skip
    kern_read = reads.pop(7)
    assert kern_read.table == KERNEL
    # a SQLite export's kernel and API columns a compare never reads wait till asked for
    # (`_later`, which reads `path` again: not for an export nsys made of a report, in a
    # temporary folder gone after this; the launch stacks of CUDA graph nodes ask at once,
    # where there are function-trace ranges)
    wait = isinstance(source, SqliteSource) and source.src == str(path)
    if wait:
        kern_read = Read(KERNEL, _of(KERNEL_COLS, KERNEL_LATER, keep=False))
        assert reads[7].table == RUNTIME
        reads[7] = Read(RUNTIME, _of(RUNTIME_COLS, API_LATER, keep=False))
    with ThreadPoolExecutor(1) as pool:
        # SQLite pages: the kernel table, the biggest read, decodes in the background (GIL
        # released) while the other tables are read and built here. Other sources read once.
        kern_job = pool.submit(source.read, [kern_read]) if _overlap(source) else None
        got = source.read(reads if kern_job else [*reads[:7], kern_read, *reads[7:]])
        if kern_job is None:
            kern = got.pop(7)
        (meta, strs, start, ecopy, emem, payload, gpu, api, cp, ms, sync, nvtx,
         cuda_ev, sysenv, nodes) = got  # fmt: skip
        strings = Strings(strs)
        api_later = (
            _later(path, Read(RUNTIME, _of(RUNTIME_COLS, API_LATER)), api.height, "API call")
            if wait
            else None
        )
        # cudaLaunchKernel_v7000 -> cudaLaunchKernel, on the string table (not per call)
        clean = narrow(series(strings.values).str.replace(r"_v\d+$", "").to_arrow())
        api_names = strings.with_values(clean)
        keys = launch_keys(api)
        copy_kinds = short_copy_kinds(
            enum_labels(ecopy, "ENUM_CUDA_MEMCPY_OPER" in have, COPY_KINDS)
        )
        mem_kinds = enum_labels(emem, "ENUM_CUDA_MEM_KIND" in have, MEM_KINDS)
        cupti_enum = SYNC in have and events.CUPTI_ENUM_COLUMN in source.columns(SYNC)
        api_names.count_missing(api["nameId"])  # as api_calls' names would: for the warning
        tables: dict[str, pa.Table | Build] = {
            "memops": memops_table(cp, ms, keys, api_names, copy_kinds, mem_kinds),
            # built on first use (runs/deferred.py): a report-only compare reads none of these
            "api_calls": lambda: api_calls_table(
                pl.concat([api, api_later()], how="horizontal") if api_later else api, api_names
            ),
            "nvtx_ranges": nvtx_table(nvtx, strings, payload, warnings, str(path)),
            "syncs": lambda: syncs_table(sync),
            "cuda_events": lambda: events.cuda_events_table(
                cuda_ev, sync, api, api_names, cupti_enum
            ),
        }
        if kern_job is not None:
            (kern,) = kern_job.result()
    seen = pl.concat([f["deviceId"].drop_nulls().unique().cast(pl.Int64) for f in (kern, cp, ms)])
    later = (
        _later(
            path, Read(KERNEL, _of(KERNEL_COLS, ("start", *KERNEL_LATER))), kern.height, "kernel"
        )
        if wait
        else None
    )
    tables["kernels"] = kernels_table(kern, keys, strings, api_names, later)
    tables["devices"] = devices_table(gpu, seen, GPU in have, warnings, str(path))
    order = ("kernels", "memops", "api_calls", "nvtx_ranges", "devices", "syncs", "cuda_events")
    run_tables = add_stacks(
        Deferred({name: tables[name] for name in order}),
        nodes if node_table else None,
        warnings,
        str(path),
    )
    kernels = (  # the columns it reads: a Partial kernel table's later ones stay unread
        run_tables.read("kernels", nccl.KERNEL_COLUMNS)
        if isinstance(run_tables, Deferred)
        else run_tables["kernels"]
    )
    run_tables["collectives"] = nccl.collectives_from(kernels, run_tables["nvtx_ranges"])
    warnings += _unread(kern, strings.missing + api_names.missing, run_tables, payload, path)
    metadata = _metadata(meta, start, sysenv, path, source_format)
    warnings += _newer_schema(metadata["nsys_schema_version"], path)
    return Run(tables=run_tables, metadata=metadata, warnings=warnings)


def _metadata(
    meta: pl.DataFrame, start: pl.DataFrame, sysenv: pl.DataFrame, path: Path, source_format: str
) -> dict[str, Any]:
    """The run's metadata: the export's META_DATA_EXPORT names, its session start, the host."""
    md = dict(zip(meta["name"].to_list(), meta["value"].to_list(), strict=True))
    return {
        "source": str(path),
        "source_format": source_format,
        "nsys_version": md.get("EXPORT_PRODUCT_VERSION"),
        "nsys_schema_version": md.get("EXPORT_SCHEMA_VERSION"),
        "time_origin_utc_ns": start["utcEpochNs"][0] if start.height else None,
        "time_base": "nsys session start",
        **identity(sysenv),
    }


def _checked(have: set[str], path: Path) -> list[str]:
    """Refuse what is not an nsys export with events (InputError); the warnings for the main
    tables it lacks."""
    if not is_nsys(have):
        raise InputError(
            f"{path}: not an Nsight Systems export (no nsys tables)",
            "export the report with `nsys export --type sqlite REPORT.nsys-rep`",
        )
    event_tables = (KERNEL, RUNTIME, NVTX, MEMCPY, MEMSET, SYNC, events.CUDA_EVENT)
    if not have & set(event_tables):  # StringIds alone (or a metadata stub) is not an empty run
        raise InputError(
            f"{path}: an nsys export without events: it has none of the tables "
            f"{', '.join(event_tables)}",
            "export the full report again (`nsys export --type sqlite REPORT.nsys-rep`); "
            "profile with `-t cuda,nvtx`",
        )
    warnings: list[str] = []
    for table, what in [(KERNEL, "kernels"), (RUNTIME, "CUDA API calls"), (NVTX, "NVTX ranges"),
                        (STRINGS, "names (kernel, API and range names will be null)")]:  # fmt: skip
        if table not in have:
            warnings.append(f"{path}: no {table} table: the report has no {what}")
    return warnings


def _unread(
    kern: pl.DataFrame,
    missing_names: int,
    tables: dict[str, pa.Table],
    payload: pl.DataFrame,
    path: Path,
) -> list[str]:
    """The warnings for what the export holds and the run leaves null: kernels without a name,
    name ids not in the string table, NCCL NVTX payloads (message sizes)."""
    warnings: list[str] = []
    unnamed = kern["demangledName"].null_count()
    if unnamed:
        warnings.append(
            f"{path}: {unnamed} kernels have no name (NULL demangledName); names are null"
        )
    if missing_names:
        warnings.append(
            f"{path}: {missing_names} name ids are not in {STRINGS}; those names are null"
        )
    nvtx_coll = series(tables["collectives"].column("source")).cast(pl.String).eq("nvtx").sum()
    if nvtx_coll and payload.filter(pl.col("name") == "Message size [bytes]").height:
        warnings.append(
            f"{path}: NCCL NVTX payloads (message sizes) are not decoded; "
            "collectives.bytes from NVTX is null"
        )
    return warnings


def _newer_schema(version: str | None, path: Path) -> list[str]:
    """A warning where the export's schema is of a newer major version than tracediff knows."""
    if (
        version
        and version.split(".")[0].isdigit()
        and int(version.split(".")[0]) > KNOWN_SCHEMA_MAJOR
    ):
        return [
            f"{path}: nsys export schema {version} is newer than tracediff knows (3.x); "
            "check the result"
        ]
    return []


SYSTEM_ENV = "TARGET_INFO_SYSTEM_ENV"
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
"""Environment variables that name a process's global rank, in the order they are trusted:
torchrun's, Open MPI's, PMI's (MPICH, Intel MPI), Slurm's task id."""
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
"""The same launchers' world size (the job's number of ranks)."""


def identity(sysenv: pl.DataFrame) -> dict[str, object]:
    """host, rank, local_rank, rank_from, world_size from the session's system environment:
    `Hostname`, and RANK / LOCAL_RANK / WORLD_SIZE (or an MPI launcher's) in `DeviceEnvironment`,
    the environment nsys was started in (a per-rank `nsys profile` under torchrun or srun has
    the rank's). Absent: None."""
    d = dict(zip(sysenv["name"].to_list(), sysenv["value"].to_list(), strict=True))
    env: dict[str, str] = {}
    for item in str(d.get("DeviceEnvironment") or "").split(";"):
        k, sep, v = item.partition("=")
        if sep:
            env.setdefault(k, v)
    rank = next(((k, env[k]) for k in RANK_VARS if env.get(k, "").isdigit()), None)
    local = env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", ""))
    world = next((int(env[k]) for k in WORLD_VARS if env.get(k, "").isdigit()), None)
    return {
        "host": d.get("Hostname") or None,
        "rank": int(rank[1]) if rank else None,
        "rank_from": f"env {rank[0]}" if rank else None,
        "local_rank": int(local) if local.isdigit() else None,
        "world_size": world,
    }


# Every table read_nsys reads: `nsys export --tables` exports only these (faster, smaller).
TABLES_READ = (
    *META_TABLES, STRINGS, "TARGET_INFO_SESSION_START_TIME", "ENUM_CUDA_MEMCPY_OPER",
    "ENUM_CUDA_MEM_KIND", PAYLOAD_ENTRIES, GPU, KERNEL, RUNTIME, MEMCPY, MEMSET, SYNC, NVTX,
    events.CUDA_EVENT, SYSTEM_ENV, graph_nodes.NODE_EVENTS, graph_nodes.GRAPH_EVENTS,
)  # fmt: skip


def _later(path: Path, wanted: Read, rows: int, what: str) -> Callable[[], pl.DataFrame]:
    """What makes the `wanted` read of the SQLite export at `path` (rows in file order) when its
    columns are first needed: the file read again by a source of its own, which must find the
    `rows` rows it held (else InputError)."""

    def read() -> pl.DataFrame:
        again = SqliteSource(path)  # gone: InputError, "cannot read"
        try:
            (got,) = again.read([wanted])
        finally:
            again.close()
        if got.height != rows:
            raise InputError(
                f"{path}: its {what} table changed while tracediff read it "
                f"({got.height} rows, {rows} before)",
                "run the command again once the export is finished",
            )
        return got

    return read


def _of(
    cols: dict[str, pl.DataType], names: tuple[str, ...], keep: bool = True
) -> dict[str, pl.DataType]:
    """`cols` (a read's columns and types) of `names` only, or (`keep` False) without them."""
    return {c: t for c, t in cols.items() if (c in names) == keep}


def _overlap(source: Source) -> bool:
    """Read the kernel table beside the others: SQLite pages decode outside the GIL, so the
    other tables are built meanwhile (on 2 cores at load ~1: ~0.1 s of 0.5 s wall)."""
    return isinstance(source, SqliteSource) and source.workers > 1


def is_nsys(tables: set[str]) -> bool:
    markers = {STRINGS, *META_TABLES, "TARGET_INFO_SESSION_START_TIME", KERNEL, NVTX}
    return bool(tables & markers)


def read_nsys_sqlite(path: Path) -> Run:
    """Read an nsys SQLite export into a Run."""
    path = Path(path)
    src = SqliteSource(path)
    try:
        return read_nsys(src, path, "nsys-sqlite")
    finally:
        src.close()
