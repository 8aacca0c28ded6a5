"""Nsight Systems SQLite export → run-file tables.

Stage: parse. Input: an nsys `.sqlite` export (schema 2.9 / nsys 2022.2 through 3.28 / 2026.x).
Output: a `Run` with the tables of `tracediff.schema`.

The only module that knows nsys table and column names. Features are detected by table and
column presence, never by version string. Raw tables are pulled as Arrow in one query each
(ADBC's SQLite driver when present, else the stdlib cursor) and joined in polars: no Python loop
runs per event.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from tracediff import schema
from tracediff.errors import InputError
from tracediff.parse import nccl
from tracediff.runfile import Run

SQLITE_MAGIC = b"SQLite format 3\x00"

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
GPU = "TARGET_INFO_GPU"

# NVTX eventType values (ENUM_NSYS_EVENT_TYPE, stable across 2022.4-2026.4)
_NVTX_MARK, _NVTX_PUSHPOP, _NVTX_STARTEND, _NVTX_DOMAIN = 34, 59, 60, 75

# Used when a report lacks its ENUM_* tables (old exports); values from the 2024.2 enums.
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
               8: "DtoD", 9: "HtoH", 10: "PtoP"}
_MEM_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed",
              6: "Device Static", 7: "Managed Static"}
_SYNC_KINDS = {1: "event", 2: "stream_wait", 3: "stream", 4: "context"}


class Db:
    """A read-only nsys SQLite export with Arrow queries and schema introspection."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.src = str(path)
        self._check_header()
        try:
            self.con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
            names = self.con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.src}: SQLite file is unreadable ({e})",
                             "the file may be truncated; export the report again") from None
        self.tables = {n for (n,) in names}
        self._cols: dict[str, list[str]] = {}
        self._adbc: Any = None

    def _check_header(self) -> None:
        try:
            with open(self.path, "rb") as f:
                head = f.read(100)
        except OSError as e:
            raise InputError(f"{self.src}: cannot read: {e.strerror}", "check the path and permissions") from None
        if head[:16] != SQLITE_MAGIC:
            raise InputError(f"{self.src}: not an SQLite file", "give an nsys report (.nsys-rep, .sqlite, .qdstrm) or a Kineto trace")
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        npages = int.from_bytes(head[28:32], "big")
        size = self.path.stat().st_size
        if npages and page and size < npages * page:
            raise InputError(f"{self.src}: SQLite file is truncated ({size} of {npages * page} bytes)",
                             "copy or export the report again")

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.con.execute(f"PRAGMA table_info({table})")]
        return self._cols[table]

    def select(self, table: str, wanted: list[str], where: str = "") -> pl.DataFrame:
        """SELECT the wanted columns that exist; missing ones come back as nulls."""
        have = set(self.columns(table))
        exprs = [c if c in have else f"NULL AS {c}" for c in wanted]
        sql = f"SELECT {', '.join(exprs)} FROM {table} {where}"
        return self.query(sql, wanted)

    def query(self, sql: str, names: list[str]) -> pl.DataFrame:
        try:
            table = self._query_adbc(sql)
        except Exception:  # noqa: BLE001 - ADBC type inference can fail on mixed columns
            table = None
        if table is None:
            try:
                rows = self.con.execute(sql).fetchall()
            except sqlite3.DatabaseError as e:
                raise InputError(f"{self.src}: query failed ({e})", "the export may be corrupt; export it again") from None
            cols = list(zip(*rows, strict=True)) if rows else [[] for _ in names]
            return pl.DataFrame({n: pl.Series(n, list(c), strict=False) for n, c in zip(names, cols, strict=True)})
        df = pl.from_arrow(table)
        assert isinstance(df, pl.DataFrame)
        return df.rename(dict(zip(df.columns, names, strict=True)))

    def _query_adbc(self, sql: str) -> pa.Table | None:
        if self._adbc is None:
            try:
                import adbc_driver_sqlite.dbapi as adbc
            except ImportError:
                self._adbc = False
                return None
            self._adbc = adbc.connect(f"file:{self.path}?mode=ro&immutable=1")
        if self._adbc is False:
            return None
        cur = self._adbc.cursor()
        try:
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(1 << 16)})
            cur.execute(sql)
            return cur.fetch_arrow_table()
        finally:
            cur.close()

    def scalar_map(self, table: str, key: str, value: str) -> dict[str, str]:
        if not self.has(table):
            return {}
        return {str(k): str(v) for k, v in self.con.execute(f"SELECT {key}, {value} FROM {table}")}

    def enum(self, table: str, fallback: dict[int, str]) -> dict[int, str]:
        if not self.has(table):
            return fallback
        out = {}
        for i, name, label in self.con.execute(f"SELECT id, name, label FROM {table}"):
            out[int(i)] = str(label or name)
        return out

    def close(self) -> None:
        self.con.close()
        if self._adbc:
            self._adbc.close()


def _strings(db: Db) -> pa.Array:
    """StringIds as a dense array indexed by id (for dictionary columns)."""
    if not db.has("StringIds"):
        return pa.array([], pa.string())
    ids = db.query("SELECT id, value FROM StringIds", ["id", "value"])
    if ids.height == 0:
        return pa.array([], pa.string())
    n = int(ids["id"].max()) + 1  # type: ignore[arg-type]
    dense = pl.DataFrame({"id": pl.arange(0, n, eager=True)}).join(ids, on="id", how="left")
    return dense["value"].to_arrow().cast(pa.string())


def _dict_col(ids: pl.Series, strings: pa.Array) -> pa.Array:
    """Map StringIds ids to a dictionary<int32,string> column (nulls stay null)."""
    idx = ids.cast(pl.Int32).to_arrow()
    if len(strings) == 0:
        return pa.nulls(len(idx), pa.dictionary(pa.int32(), pa.string()))
    bad = pl.Series(ids).is_not_null() & ((ids < 0) | (ids >= len(strings)))
    if bad.any():
        idx = pl.Series(ids).set(bad, None).cast(pl.Int32).to_arrow()  # type: ignore[arg-type]
    return pa.DictionaryArray.from_arrays(idx, strings)


def _label_dict(values: pl.Series, labels: dict[int, str]) -> pa.Array:
    return pl.Series(values).replace_strict(labels, default=None, return_dtype=pl.String).cast(pl.Categorical).to_arrow()


def _pid(col: str) -> pl.Expr:
    return ((pl.col(col) // (1 << 24)) % (1 << 24)).cast(pl.Int64)


def _tid(col: str) -> pl.Expr:
    return (pl.col(col) % (1 << 24)).cast(pl.Int64)


def _api_calls(db: Db, strings: pa.Array) -> pl.DataFrame:
    """CUDA runtime + driver calls, with raw globalTid kept for the launch join."""
    if not db.has(RUNTIME):
        return pl.DataFrame()
    df = db.select(RUNTIME, ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"])
    # cudaLaunchKernel_v7000 -> cudaLaunchKernel, on the string table (not per call)
    clean = pl.Series("s", strings, dtype=pl.String).str.replace(r"_v\d+$", "").to_arrow().cast(pa.string())
    return df.with_columns(
        pl.Series("name", _dict_col(df["nameId"], clean)),
        pl.when(pl.col("eventClass") == 1).then(pl.lit("driver")).otherwise(pl.lit("runtime")).alias("api_kind"),
    )


def _launch_join(ops: pl.DataFrame, api: pl.DataFrame) -> pl.DataFrame:
    """Attach the launching API call (thread, name, times) by (process, correlationId)."""
    if api.height == 0:
        return ops.with_columns(
            pl.lit(None, pl.Int64).alias("launch_thread_id"),
            pl.lit(None, pl.Categorical).alias("launch_api"),
            pl.lit(None, pl.Int64).alias("launch_start_ns"),
            pl.lit(None, pl.Int64).alias("launch_end_ns"),
        )
    keys = (
        api.filter(pl.col("correlationId").is_not_null() & (pl.col("correlationId") != 0))
        .select(
            (pl.col("globalTid") - pl.col("globalTid") % (1 << 24)).alias("_gpid"),
            pl.col("correlationId").alias("_corr"),
            _tid("globalTid").alias("launch_thread_id"),
            pl.col("name").alias("launch_api"),
            pl.col("start").alias("launch_start_ns"),
            pl.col("end").alias("launch_end_ns"),
        )
        .unique(subset=["_gpid", "_corr"], keep="first", maintain_order=True)
    )
    return ops.join(keys, left_on=["globalPid", "correlationId"], right_on=["_gpid", "_corr"], how="left", maintain_order="left")


def _kernels(db: Db, strings: pa.Array, api: pl.DataFrame) -> pa.Table:
    if not db.has(KERNEL):
        return schema.empty("kernels")
    df = db.select(KERNEL, [
        "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName",
        "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
        "staticSharedMemory", "dynamicSharedMemory", "graphNodeId",
    ], "ORDER BY start")
    df = _launch_join(df, api)
    out = df.select(
        pl.col("deviceId").alias("device_id"),
        _pid("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        pl.col("gridX").alias("grid_x"), pl.col("gridY").alias("grid_y"), pl.col("gridZ").alias("grid_z"),
        pl.col("blockX").alias("block_x"), pl.col("blockY").alias("block_y"), pl.col("blockZ").alias("block_z"),
        pl.col("registersPerThread").alias("registers_per_thread"),
        pl.col("staticSharedMemory").alias("static_shared_memory_bytes"),
        pl.col("dynamicSharedMemory").alias("dynamic_shared_memory_bytes"),
        pl.col("correlationId").alias("correlation_id"),
        pl.col("graphNodeId").alias("graph_node_id"),
        "launch_thread_id", "launch_api", "launch_start_ns", "launch_end_ns",
    ).to_arrow()
    out = out.append_column("name", _dict_col(df["demangledName"], strings))
    short = df["shortName"].fill_null(df["demangledName"])
    out = out.append_column("short_name", _dict_col(short, strings))
    return schema.conform("kernels", out)


def _memops(db: Db, strings: pa.Array, api: pl.DataFrame) -> pa.Table:
    parts = []
    common = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "graphNodeId"]
    if db.has(MEMCPY):
        cp = db.select(MEMCPY, common + ["copyKind", "srcKind", "dstKind"])
        ck = db.enum("ENUM_CUDA_MEMCPY_OPER", _COPY_KINDS)
        mk = db.enum("ENUM_CUDA_MEM_KIND", _MEM_KINDS)
        parts.append(cp.with_columns(
            pl.lit("memcpy").alias("kind"),
            pl.Series("copy_kind", _label_dict(cp["copyKind"], _short_copy_kinds(ck))),
            pl.Series("src_kind", _label_dict(cp["srcKind"], mk)),
            pl.Series("dst_kind", _label_dict(cp["dstKind"], mk)),
        ).drop("copyKind", "srcKind", "dstKind"))
    if db.has(MEMSET):
        ms = db.select(MEMSET, common + ["memKind"])
        mk = db.enum("ENUM_CUDA_MEM_KIND", _MEM_KINDS)
        parts.append(ms.with_columns(
            pl.lit("memset").alias("kind"),
            pl.lit(None, pl.Categorical).alias("copy_kind"),
            pl.lit(None, pl.Categorical).alias("src_kind"),
            pl.Series("dst_kind", _label_dict(ms["memKind"], mk)),
        ).drop("memKind"))
    if not parts:
        return schema.empty("memops")
    df = pl.concat(parts, how="vertical_relaxed").sort("start")
    df = _launch_join(df, api)
    out = df.select(
        pl.col("deviceId").alias("device_id"),
        _pid("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        "kind", "copy_kind", "bytes", "src_kind", "dst_kind",
        pl.col("correlationId").alias("correlation_id"),
        pl.col("graphNodeId").alias("graph_node_id"),
        "launch_thread_id", "launch_api", "launch_start_ns", "launch_end_ns",
    )
    return schema.conform("memops", out.to_arrow())


def _short_copy_kinds(labels: dict[int, str]) -> dict[int, str]:
    """ENUM labels read 'Device-to-Device'; keep the conventional short form (DtoD)."""
    short = dict(_COPY_KINDS)
    for k, v in labels.items():
        if k not in short:
            short[k] = v
    return short


def _nvtx(db: Db, strings: pa.Array) -> pa.Table:
    if not db.has(NVTX):
        return schema.empty("nvtx_ranges")
    wanted = ["start", "end", "eventType", "globalTid", "endGlobalTid", "text", "textId", "domainId",
              "category", "int64Value", "uint64Value", "int32Value", "uint32Value", "doubleValue", "floatValue"]
    df = db.select(NVTX, wanted, f"WHERE eventType IN ({_NVTX_MARK},{_NVTX_PUSHPOP},{_NVTX_STARTEND},{_NVTX_DOMAIN})")
    str_df = pl.DataFrame({"textId": pl.arange(0, len(strings), eager=True, dtype=pl.Int64),
                           "_s": pl.Series("_s", strings, dtype=pl.String)})
    df = df.join(str_df, on="textId", how="left", maintain_order="left").with_columns(
        pl.coalesce(pl.col("text").cast(pl.String), pl.col("_s")).alias("name"),
        ((pl.col("globalTid") // (1 << 24)) % (1 << 24)).alias("_pidkey"),
    )
    domains = (
        df.filter(pl.col("eventType") == _NVTX_DOMAIN)
        .select("domainId", "_pidkey", pl.col("name").alias("domain"))
        .unique(subset=["domainId", "_pidkey"], keep="last")
    )
    r = df.filter(pl.col("eventType") != _NVTX_DOMAIN).join(domains, on=["domainId", "_pidkey"], how="left", maintain_order="left")
    r = r.with_columns(
        pl.when(pl.col("eventType") == _NVTX_MARK).then(pl.col("start")).otherwise(pl.col("end")).alias("end"),
        pl.col("eventType").replace_strict({_NVTX_MARK: "mark", _NVTX_PUSHPOP: "push_pop", _NVTX_STARTEND: "start_end"},
                                           default=None, return_dtype=pl.String).alias("range_kind"),
        pl.coalesce("int64Value", "uint64Value", "int32Value", "uint32Value").cast(pl.Int64).alias("payload_int"),
        pl.coalesce("doubleValue", "floatValue").cast(pl.Float64).alias("payload_double"),
        _pid("globalTid").alias("process_id"),
        _tid("globalTid").alias("thread_id"),
        pl.when(pl.col("endGlobalTid").is_not_null()).then(_tid("endGlobalTid")).alias("end_thread_id"),
    ).sort("process_id", "thread_id", "start")
    r = r.with_columns(nesting_depth(r, "start", "end", ["process_id", "thread_id"]).alias("depth"))
    out = r.select(
        "process_id", "thread_id", "end_thread_id",
        pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        "domain", "name", "depth", "range_kind", "category", "payload_int", "payload_double",
    ).sort("start_ns")
    return schema.conform("nvtx_ranges", out.to_arrow())


def nesting_depth(df: pl.DataFrame, start: str, end: str, by: list[str]) -> pl.Series:
    """Depth of each interval among the intervals of its group (0 = outermost), vectorised.

    Boundary sweep: +1 at each start, -1 at each end; an interval's depth is the number of
    intervals open just before it starts. Ends sort before starts at the same instant; starts at
    the same instant open the longer interval first. Unclosed intervals never end.
    """
    if df.height == 0:
        return pl.Series("depth", [], dtype=pl.Int32)
    big = (1 << 62)
    idx = pl.arange(0, df.height, eager=True).alias("_i")
    base = df.select(*by, pl.col(start).alias("_t0"), pl.col(end).fill_null(big).alias("_t1")).with_columns(idx)
    starts = base.select(*by, pl.col("_t0").alias("_t"), pl.lit(1).alias("_kind"), (-pl.col("_t1")).alias("_tie"), "_i", pl.lit(1).alias("_d"))
    ends = base.select(*by, pl.col("_t1").alias("_t"), pl.lit(0).alias("_kind"), pl.lit(0, pl.Int64).alias("_tie"), "_i", pl.lit(-1).alias("_d"))
    ev = pl.concat([starts, ends]).sort([*by, "_t", "_kind", "_tie"])
    ev = ev.with_columns(pl.col("_d").cum_sum().over(by).alias("_open"))
    depth = ev.filter(pl.col("_kind") == 1).select("_i", (pl.col("_open") - 1).cast(pl.Int32).alias("depth")).sort("_i")
    return depth["depth"]


def _devices(db: Db) -> pa.Table:
    if not db.has(GPU):
        return schema.empty("devices")
    df = db.select(GPU, ["id", "name", "smCount", "totalMemory", "busLocation", "uuid", "computeMajor", "computeMinor", "clockRate"])
    out = df.select(
        pl.col("id").alias("device_id"),
        pl.col("name").cast(pl.String),
        pl.col("smCount").alias("sm_count"),
        pl.col("totalMemory").alias("memory_bytes"),
        pl.col("busLocation").cast(pl.String).alias("bus_location"),
        pl.col("uuid").cast(pl.String),
        pl.concat_str(pl.col("computeMajor").cast(pl.String), pl.lit("."), pl.col("computeMinor").cast(pl.String)).alias("compute_capability"),
        pl.col("clockRate").alias("clock_hz"),
    ).unique(subset=["device_id"], keep="first", maintain_order=True)
    return schema.conform("devices", out.to_arrow())


def _syncs(db: Db) -> pa.Table:
    if not db.has(SYNC):
        return schema.empty("syncs")
    df = db.select(SYNC, ["start", "end", "deviceId", "streamId", "globalPid", "syncType", "eventId", "correlationId"])
    out = df.select(
        pl.col("deviceId").alias("device_id"),
        _pid("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        pl.Series("sync_kind", _label_dict(df["syncType"], _SYNC_KINDS)),
        pl.col("eventId").cast(pl.Int64).alias("event_id"),
        pl.col("correlationId").alias("correlation_id"),
    ).sort("start_ns")
    return schema.conform("syncs", out.to_arrow())


def _metadata(db: Db, path: Path) -> dict[str, Any]:
    meta = db.scalar_map("META_DATA_EXPORT", "name", "value") or db.scalar_map("EXPORT_META_DATA", "name", "value")
    start = None
    if db.has("TARGET_INFO_SESSION_START_TIME"):
        row = db.con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        start = int(row[0]) if row and row[0] is not None else None
    return {
        "source": str(path),
        "source_format": "nsys-sqlite",
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "nsys_schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
        "time_origin_utc_ns": start,
        "time_base": "nsys session start",
    }


def is_nsys(db: Db) -> bool:
    markers = {"StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_SESSION_START_TIME", KERNEL, NVTX}
    return bool(db.tables & markers)


def read_nsys_sqlite(path: Path) -> Run:
    """Read an nsys SQLite export into a Run."""
    path = Path(path)
    db = Db(path)
    try:
        if not is_nsys(db):
            raise InputError(f"{path}: SQLite file is not an Nsight Systems export (no nsys tables)",
                             "export the report with `nsys export --type sqlite REPORT.nsys-rep`")
        warnings = []
        for table, what in [(KERNEL, "kernels"), (RUNTIME, "CUDA API calls"), (NVTX, "NVTX ranges")]:
            if not db.has(table):
                warnings.append(f"{path}: no {table} table: the report has no {what}")
        strings = _strings(db)
        api = _api_calls(db, strings)
        kernels = _kernels(db, strings, api)
        nvtx_ranges = _nvtx(db, strings)
        tables = {
            "kernels": kernels,
            "memops": _memops(db, strings, api),
            "api_calls": _api_table(api),
            "nvtx_ranges": nvtx_ranges,
            "devices": _devices(db),
            "syncs": _syncs(db),
        }
        tables["collectives"] = nccl.collectives_from(tables["kernels"], tables["nvtx_ranges"], tables["api_calls"])
        meta = _metadata(db, path)
        return Run(tables=tables, metadata=meta, warnings=warnings)
    except sqlite3.DatabaseError as e:
        raise InputError(f"{path}: SQLite file is corrupt ({e})", "export the report again") from None
    finally:
        db.close()


def _api_table(api: pl.DataFrame) -> pa.Table:
    if api.height == 0:
        return schema.empty("api_calls")
    out = api.select(
        _pid("globalTid").alias("process_id"),
        _tid("globalTid").alias("thread_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        "name", "api_kind",
        pl.col("correlationId").alias("correlation_id"),
        pl.col("returnValue").alias("return_value"),
    ).sort("start_ns")
    return schema.conform("api_calls", out.to_arrow())
