"""Nsight Systems export (SQLite file or Parquet folder) → run-file tables.

Stage: parse. Input: an nsys export, schema 2.9 (nsys 2022.2) through 3.28 (2026.x), read through
a `Source`: `SqliteSource` here, `ParquetSource` in nsys_cli.py (same tables and columns, one
`<TABLE>.parquet` per table). Output: a `Run` with the tables of `tracediff.schema`.

The only module that knows nsys table and column names. Features are detected by table and
column presence, never by version string. Each raw table is pulled as Arrow (ADBC's SQLite
driver, large tables split by rowid range over a thread pool) and joined in polars: no Python
loop runs per event. Missing optional tables give empty tables plus a warning.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
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
STRINGS = "StringIds"
PAYLOAD_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023.4+ / up to 2022.x

# NVTX eventType values (ENUM_NSYS_EVENT_TYPE, stable across 2022.4-2026.4)
_NVTX_MARK, _NVTX_PUSHPOP, _NVTX_STARTEND, _NVTX_DOMAIN = 34, 59, 60, 75
_RANGE_KINDS = {_NVTX_MARK: "mark", _NVTX_PUSHPOP: "push_pop", _NVTX_STARTEND: "start_end"}

# Used when a report lacks its ENUM_* tables (old exports); values from the 2024.2 enums.
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
               8: "DtoD", 9: "HtoH", 10: "PtoP"}  # fmt: skip
# nsys's own ENUM_CUDA_MEM_KIND numbering (not CUPTI's): checked on 2022.2, 2024.2 and 2026.1 data
_MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
              5: "Device Static", 6: "Managed Static", 7: "Unknown"}  # fmt: skip
# ENUM_CUPTI_SYNC_TYPE labels. Not validated: in real 2024.2 and 2026.1 exports syncType 2
# ("stream wait") sits on cudaStreamSynchronize and cudaEventQuery calls.
_SYNC_KINDS = {1: "event", 2: "stream_wait", 3: "stream", 4: "context"}
_KNOWN_SCHEMA_MAJOR = 3

I64, STR, F64 = pl.Int64(), pl.String(), pl.Float64()
_TID_BITS = 1 << 24


@dataclass(frozen=True)
class Read:
    """One raw-table read: wanted columns and their types (absent columns come back as nulls),
    optionally only rows whose integer column `where_in[0]` is in `where_in[1]`."""

    table: str
    cols: Mapping[str, pl.DataType]
    where_in: tuple[str, tuple[int, ...]] | None = None


class Source(Protocol):
    """Where raw nsys tables come from: an SQLite export or a Parquet folder."""

    src: str
    tables: set[str]

    def columns(self, table: str) -> list[str]: ...

    def read(self, reads: Sequence[Read]) -> list[pl.DataFrame]: ...

    def close(self) -> None: ...


def typed(df: pl.DataFrame, read: Read, have: Sequence[str], src: str) -> pl.DataFrame:
    """Columns of `read` in order with their declared types; absent ones as typed nulls.

    uint64 columns (Parquet exports) are reinterpreted as int64, which is what SQLite stores.
    A value that cannot take its column's type is an error, never a silent null.
    """
    exprs = []
    for name, dtype in read.cols.items():
        if name not in have:  # repeat, not lit: the frame keeps its height even with no columns
            exprs.append(pl.repeat(None, df.height, dtype=dtype).alias(name))
        elif df.schema[name] == pl.UInt64 and dtype == I64:
            exprs.append(pl.col(name).reinterpret(signed=True))
        elif df.schema[name] != dtype:
            exprs.append(pl.col(name).cast(dtype, strict=True))
        else:
            exprs.append(pl.col(name))
    try:
        return df.select(exprs)
    except pl.exceptions.PolarsError:
        raise InputError(
            f"{src}: table {read.table} holds values of the wrong type",
            "the export is corrupt or not from Nsight Systems; export the report again",
        ) from None


def _utf8(table: pa.Table) -> pa.Table:
    """SQLite TEXT can hold any bytes; Arrow strings must be UTF-8. Bad bytes become U+FFFD.

    The check is one pass in C++; the repair loop runs only over a column that fails it.
    """
    for i, field in enumerate(table.schema):
        if not pa.types.is_string(field.type) and not pa.types.is_large_string(field.type):
            continue
        col = table.column(i)
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            raw = col.cast(pa.large_binary()).to_pylist()
            fixed = pa.array(
                [None if b is None else b.decode("utf-8", "replace") for b in raw], field.type
            )
            table = table.set_column(i, field, fixed)
    return table


class SqliteSource:
    """A read-only nsys SQLite export. Queries run through ADBC (Arrow) with a stdlib fallback."""

    CHUNK_ROWS = 262_144  # tables larger than this are read in parallel rowid ranges

    def __init__(self, path: Path, workers: int | None = None) -> None:
        self.path = Path(path)
        self.src = str(path)
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._check_header()
        self._uri = f"file:{self.path}?mode=ro&immutable=1"
        try:
            self.con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            names = self.con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(
                f"{self.src}: SQLite file is unreadable ({e})",
                "the file may be truncated or corrupt; export the report again",
            ) from None
        self.tables = {n for (n,) in names}
        self._cols: dict[str, list[str]] = {}
        self._local = threading.local()
        self._adbc_cons: list[Any] = []
        self._lock = threading.Lock()
        try:
            import adbc_driver_sqlite.dbapi as adbc

            self._adbc: Any = adbc
        except ImportError:
            self._adbc = None

    def _check_header(self) -> None:
        try:
            with open(self.path, "rb") as f:
                head = f.read(100)
        except OSError as e:
            raise InputError(
                f"{self.src}: cannot read: {e.strerror}", "check the path and permissions"
            ) from None
        if head[:16] == SQLITE_MAGIC and len(head) < 100:
            raise InputError(
                f"{self.src}: not an SQLite file: truncated inside its 100-byte header",
                "copy or export the report again",
            )
        if head[:16] != SQLITE_MAGIC:
            raise InputError(
                f"{self.src}: not an SQLite file",
                "give an nsys report (.nsys-rep, .sqlite, .qdstrm) or a Kineto trace",
            )
        page = int.from_bytes(head[16:18], "big")
        page = 65536 if page == 1 else page
        npages = int.from_bytes(head[28:32], "big")
        size = self.path.stat().st_size
        if npages and page and size < npages * page:
            raise InputError(
                f"{self.src}: SQLite file is truncated ({size} of {npages * page} bytes)",
                "copy or export the report again",
            )

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self._exec(f'PRAGMA table_info("{table}")')]
        return self._cols[table]

    def _exec(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            return self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(
                f"{self.src}: SQLite file is corrupt ({e})",
                "the export may be truncated; export it again",
            ) from None

    def _sql(self, read: Read, rowids: tuple[int, int] | None, cast_all: bool) -> str:
        have = set(self.columns(read.table))
        exprs = []
        for c, t in read.cols.items():
            if c not in have:
                continue
            # TEXT columns are cast so a stray integer cannot fix the column's Arrow type
            if t == STR or (cast_all and t == F64):
                exprs.append(f'CAST("{c}" AS {"TEXT" if t == STR else "REAL"}) AS "{c}"')
            else:
                exprs.append(f'"{c}"')
        where = []
        if read.where_in and read.where_in[0] in have:
            where.append(
                f'"{read.where_in[0]}" IN ({",".join(str(int(v)) for v in read.where_in[1])})'
            )
        if rowids:
            where.append(f"rowid BETWEEN {rowids[0]} AND {rowids[1]}")
        sql = f'SELECT {", ".join(exprs) or "NULL AS _none"} FROM "{read.table}"'
        return sql + (f" WHERE {' AND '.join(where)}" if where else "")

    def _adbc_con(self) -> Any:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._adbc.connect(self._uri)
            self._local.con = con
            with self._lock:
                self._adbc_cons.append(con)
        return con

    def _fetch(self, read: Read, rowids: tuple[int, int] | None) -> pl.DataFrame:
        have = [c for c in read.cols if c in set(self.columns(read.table))]
        if self._adbc is not None:
            # Type inference looks at the first batch; on a mismatch later (a column NULL for
            # 64k rows, then text) retry with one batch so inference sees every row.
            for batch in (1 << 16, 1 << 30):
                cur = self._adbc_con().cursor()
                try:
                    cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(batch)})
                    cur.execute(self._sql(read, rowids, cast_all=False))
                    table = cur.fetch_arrow_table()
                except Exception:  # noqa: BLE001 - ADBC raises several types; fall back below
                    continue
                finally:
                    cur.close()
                df = pl.from_arrow(_utf8(table))
                assert isinstance(df, pl.DataFrame)
                return typed(
                    df.rename(dict(zip(df.columns, have, strict=False))), read, have, self.src
                )
        return self._fetch_stdlib(read, rowids, have)

    def _fetch_stdlib(
        self, read: Read, rowids: tuple[int, int] | None, have: list[str]
    ) -> pl.DataFrame:
        con = sqlite3.connect(self._uri, uri=True)
        con.text_factory = lambda b: b.decode("utf-8", "replace")  # TEXT may hold any bytes
        try:
            rows = con.execute(self._sql(read, rowids, cast_all=True)).fetchall()
        except sqlite3.DatabaseError as e:
            raise InputError(
                f"{self.src}: SQLite file is corrupt ({e})",
                "the export may be truncated; export it again",
            ) from None
        finally:
            con.close()
        cols = list(zip(*rows, strict=True)) if rows else [() for _ in have]
        try:
            data = {
                c: pl.Series(c, list(v), dtype=read.cols[c], strict=True)
                for c, v in zip(have, cols, strict=True)
            }
        except (TypeError, OverflowError, pl.exceptions.PolarsError):
            raise InputError(
                f"{self.src}: table {read.table} holds values of the wrong type",
                "the export is corrupt or not from Nsight Systems; export the report again",
            ) from None
        return typed(
            pl.DataFrame(data, schema={c: read.cols[c] for c in have}), read, have, self.src
        )

    def _ranges(self, read: Read) -> list[tuple[int, int] | None]:
        if self.workers == 1:
            return [None]
        # two queries: SQLite answers a lone min() or max() of rowid from the b-tree ends
        (lo,) = self._exec(f'SELECT min(rowid) FROM "{read.table}"')[0]
        (hi,) = self._exec(f'SELECT max(rowid) FROM "{read.table}"')[0]
        if lo is None or hi - lo < self.CHUNK_ROWS:
            return [None]
        n = min(self.workers * 2, -(-(hi - lo + 1) // (self.CHUNK_ROWS // 2)))
        step = -(-(hi - lo + 1) // n)
        return [(a, min(a + step - 1, hi)) for a in range(lo, hi + 1, step)]

    def read(self, reads: Sequence[Read]) -> list[pl.DataFrame]:
        tasks = [
            (i, r, rng)
            for i, r in enumerate(reads)
            if r.table in self.tables
            for rng in self._ranges(r)
        ]
        parts: dict[int, list[pl.DataFrame]] = {i: [] for i in range(len(reads))}
        if len(tasks) > 1 and self.workers > 1:
            with ThreadPoolExecutor(self.workers) as pool:
                results = list(pool.map(lambda t: self._fetch(t[1], t[2]), tasks))
        else:
            results = [self._fetch(r, rng) for _, r, rng in tasks]
        for (i, _, _), df in zip(tasks, results, strict=True):
            parts[i].append(df)
        out = []
        for i, r in enumerate(reads):
            if not parts[i]:
                out.append(pl.DataFrame(schema=r.cols))
            else:
                # one contiguous chunk: every later step (joins, gathers, casts) runs faster on it
                df = parts[i][0] if len(parts[i]) == 1 else pl.concat(parts[i], rechunk=False)
                out.append(df.rechunk())
        return out

    def close(self) -> None:
        self.con.close()
        for con in self._adbc_cons:
            con.close()
        self._adbc_cons.clear()


# ------------------------------------------------------------------------------ raw columns


def _ints(*names: str) -> dict[str, pl.DataType]:
    return {n: I64 for n in names}


_KERNEL_COLS = _ints(
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName",
    "shortName", "graphNodeId",
) | {  # int32 as in the run file (and in nsys's Parquet): no cast there and back
    c: pl.Int32() for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
                            "registersPerThread", "staticSharedMemory", "dynamicSharedMemory")
}  # fmt: skip
_RUNTIME_COLS = _ints(
    "start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"
)
_MEM_COLS = _ints(
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "graphNodeId"
)
_MEMCPY_COLS = _MEM_COLS | _ints("copyKind", "srcKind", "dstKind")
_MEMSET_COLS = _MEM_COLS | _ints("memKind")
_SYNC_COLS = _ints(
    "start", "end", "deviceId", "streamId", "globalPid", "syncType", "eventId", "correlationId"
)
_NVTX_COLS = (
    _ints("start", "end", "eventType", "globalTid", "endGlobalTid")
    | {"text": STR}
    | _ints(
        "textId", "domainId", "category", "int64Value", "uint64Value", "int32Value", "uint32Value"
    )
    | {"doubleValue": F64, "floatValue": F64}
)
_GPU_COLS = {"id": I64, "name": STR, "smCount": I64, "totalMemory": I64, "busLocation": STR,
             "uuid": STR, "computeMajor": I64, "computeMinor": I64, "clockRate": I64}  # fmt: skip
_ENUM_COLS = {"id": I64, "name": STR, "label": STR}
_NAME_VALUE = {"name": STR, "value": STR}
_PAYLOAD_COLS = {"domainId": I64, "schemaId": I64, "name": STR}


# ------------------------------------------------------------------------- strings, labels


class Strings:
    """StringIds as the dictionary of name columns. Ids may be sparse (sliced exports)."""

    def __init__(self, df: pl.DataFrame, values: pa.Array | None = None) -> None:
        df = df.filter(pl.col("id").is_not_null()).unique("id", keep="first").sort("id")
        self.ids = df["id"].to_numpy()
        self.values = values if values is not None else df["value"].to_arrow().cast(pa.string())
        n = len(self.ids)
        self.dense = n == 0 or (self.ids[0] == 0 and self.ids[-1] == n - 1)
        self.missing = 0  # ids referenced by events but absent from StringIds

    def with_values(self, values: pa.Array) -> Strings:
        other = Strings.__new__(Strings)
        other.ids, other.values, other.dense, other.missing = self.ids, values, self.dense, 0
        return other

    def lookup(self, ids: pl.Series) -> pa.DictionaryArray:
        n = len(self.ids)
        if self.dense and len(ids) and ids.null_count() == 0 and ids.min() >= 0 and ids.max() < n:  # type: ignore[operator]
            # the common case: every id known, and ids are positions already
            idx = ids.cast(pl.Int32).to_arrow()
            return pa.DictionaryArray.from_arrays(
                idx.combine_chunks() if isinstance(idx, pa.ChunkedArray) else idx, self.values
            )
        nulls = ids.is_null().to_numpy()
        vals = ids.cast(pl.Int64).fill_null(-1).to_numpy()
        if self.dense:
            pos = vals
            found = (vals >= 0) & (vals < n)
        elif n:
            pos = np.minimum(np.searchsorted(self.ids, vals), n - 1)
            found = self.ids[pos] == vals
        else:
            pos, found = vals, np.zeros(len(vals), dtype=bool)
        self.missing += int((~found & ~nulls).sum())
        idx = pa.array(np.where(found, pos, 0).astype(np.int32), mask=~found)
        return pa.DictionaryArray.from_arrays(idx, self.values)

    def strings(self, ids: pl.Series) -> pl.Series:
        s = pl.from_arrow(self.lookup(ids).cast(pa.string()))
        assert isinstance(s, pl.Series)
        return s


def _labels(codes: pl.Series, labels: dict[int, str]) -> pa.DictionaryArray:
    names = sorted(set(labels.values()))
    pos = {k: names.index(v) for k, v in labels.items()}
    idx = codes.replace_strict(pos, default=None, return_dtype=pl.Int32)
    return pa.DictionaryArray.from_arrays(idx.to_arrow(), pa.array(names, pa.string()))


def _codes(codes: pl.Series, names: list[str]) -> pa.DictionaryArray:
    """Small int codes → dictionary column over `names`."""
    return pa.DictionaryArray.from_arrays(
        codes.cast(pl.Int32).to_arrow(), pa.array(names, pa.string())
    )


_PL_TYPES = {
    pa.int32(): pl.Int32(),
    pa.int64(): pl.Int64(),
    pa.float64(): pl.Float64(),
    pa.string(): pl.String(),
}


def _finish(table: str, df: pl.DataFrame, dicts: dict[str, pa.Array]) -> pa.Table:
    """Assemble `table` in schema order with exact types, so schema.conform has nothing to cast."""
    cols = []
    for f in schema.TABLES[table]:
        if f.name in dicts:
            a = dicts[f.name]
        elif f.name in df.columns:
            s = df[f.name]
            if pa.types.is_dictionary(f.type):
                a = s.cast(pl.String).to_arrow().cast(pa.string()).dictionary_encode()
            else:
                a = s.cast(_PL_TYPES[f.type]).to_arrow()
        else:
            a = pa.nulls(df.height, f.type)
        if isinstance(a, pa.ChunkedArray):
            a = a.combine_chunks()
        cols.append(a if a.type == f.type else a.cast(f.type))
    return pa.Table.from_arrays(cols, schema=schema.TABLES[table])


def _pid(col: str) -> pl.Expr:
    return ((pl.col(col) // _TID_BITS) % _TID_BITS).cast(pl.Int64)


def _tid(col: str) -> pl.Expr:
    return (pl.col(col) % _TID_BITS).cast(pl.Int64)


def _by_start(df: pl.DataFrame, col: str = "start") -> pl.DataFrame:
    # SQLite ORDER BY costs more than the whole read; nsys tables are mostly in order already
    return df if df[col].is_sorted() else df.sort(col, maintain_order=True)


# ------------------------------------------------------------------------------ tables


def _launch_keys(api: pl.DataFrame) -> pl.DataFrame:
    """(process, correlationId) → launching thread, API name id and times."""
    return api.filter(
        pl.col("correlationId").is_not_null() & (pl.col("correlationId") != 0)
    ).select(
        (pl.col("globalTid") - pl.col("globalTid") % _TID_BITS).alias("globalPid"),
        "correlationId",
        _tid("globalTid").alias("launch_thread_id"),
        pl.col("nameId").alias("_launch_name"),
        pl.col("start").alias("launch_start_ns"),
        pl.col("end").alias("launch_end_ns"),
    )


def _launch_join(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Left-join each GPU op to its launch call; an id seen twice in a process keeps the first."""
    on = ["globalPid", "correlationId"]
    if ops.is_empty() or keys.is_empty():
        return ops.join(keys, on=on, how="left")
    lo = ops["globalPid"].min()
    if lo == ops["globalPid"].max() and keys["globalPid"].min() == keys["globalPid"].max() == lo:
        # One process on both sides (the usual report): binary search on correlationId, 3-4x
        # faster than a hash join (the API table is already in correlationId order).
        keys = keys.drop("globalPid")
        kc = keys["correlationId"].to_numpy()
        if not keys["correlationId"].is_sorted():
            order = np.argsort(kc, kind="stable")
            keys, kc = keys[pl.Series(order)], kc[order]
        q = ops["correlationId"].fill_null(-1).to_numpy()
        pos = np.minimum(np.searchsorted(kc, q), len(kc) - 1)
        found = (kc[pos] == q) & ops["correlationId"].is_not_null().to_numpy()
        idx = pl.Series("_i", pos)
        if not found.all():
            idx = idx.set(pl.Series(~found), None)
        return pl.concat([ops, keys.drop("correlationId")[idx]], how="horizontal")
    out = ops.join(keys, on=on, how="left", maintain_order="left")
    if out.height != ops.height:
        keys = keys.unique(subset=on, keep="first", maintain_order=True)
        out = ops.join(keys, on=on, how="left", maintain_order="left")
    return out


def _common(df: pl.DataFrame) -> list[pl.Expr | str]:
    return [
        pl.col("deviceId").alias("device_id"),
        _pid("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        pl.col("correlationId").alias("correlation_id"),
        pl.col("graphNodeId").alias("graph_node_id"),
        "launch_thread_id", "launch_start_ns", "launch_end_ns",
    ]  # fmt: skip


def _kernels(
    df: pl.DataFrame, keys: pl.DataFrame, strings: Strings, api_names: Strings
) -> pa.Table:
    df = _launch_join(_by_start(df), keys)
    out = df.select(
        *_common(df),
        *[pl.col(f"{g}{a.upper()}").alias(f"{g}_{a}") for g in ("grid", "block") for a in "xyz"],
        pl.col("registersPerThread").alias("registers_per_thread"),
        pl.col("staticSharedMemory").alias("static_shared_memory_bytes"),
        pl.col("dynamicSharedMemory").alias("dynamic_shared_memory_bytes"),
    )  # fmt: skip
    return _finish("kernels", out, {
        "name": strings.lookup(df["demangledName"]),
        "short_name": strings.lookup(
            df["shortName"].fill_null(df["demangledName"])
            if df["shortName"].null_count()
            else df["shortName"]
        ),
        "launch_api": api_names.lookup(df["_launch_name"]),
    })  # fmt: skip


def _memops(
    cp: pl.DataFrame, ms: pl.DataFrame, keys: pl.DataFrame, api_names: Strings,
    copy_kinds: dict[int, str], mem_kinds: dict[int, str],
) -> pa.Table:  # fmt: skip
    cp = cp.with_columns(
        pl.lit(0, pl.Int32).alias("_kind"), pl.lit(None, pl.Int64).alias("memKind")
    )
    ms = ms.with_columns(
        pl.lit(1, pl.Int32).alias("_kind"),
        *[pl.lit(None, pl.Int64).alias(c) for c in ("copyKind", "srcKind", "dstKind")],
    )
    df = pl.concat([cp, ms.select(cp.columns)])
    df = _launch_join(_by_start(df), keys)
    return _finish("memops", df.select(*_common(df), "bytes"), {
        "kind": _codes(df["_kind"], ["memcpy", "memset"]),
        "copy_kind": _labels(df["copyKind"], copy_kinds),
        "src_kind": _labels(df["srcKind"], mem_kinds),
        # a memset writes to memory of kind memKind
        "dst_kind": _labels(df["dstKind"].fill_null(df["memKind"]), mem_kinds),
        "launch_api": api_names.lookup(df["_launch_name"]),
    })  # fmt: skip


def _api_table(api: pl.DataFrame, api_names: Strings) -> pa.Table:
    api = _by_start(api)
    out = api.select(
        _pid("globalTid").alias("process_id"),
        _tid("globalTid").alias("thread_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        pl.col("correlationId").alias("correlation_id"),
        pl.col("returnValue").alias("return_value"),
    )
    kind = (api["eventClass"] == 1).cast(pl.Int32)  # ENUM_NSYS_EVENT_CLASS: 0 runtime, 1 driver
    return _finish("api_calls", out, {
        "name": api_names.lookup(api["nameId"]),
        "api_kind": _codes(kind, ["runtime", "driver"]),
    })  # fmt: skip


def _nvtx(
    df: pl.DataFrame, strings: Strings, payload: pl.DataFrame, warnings: list[str], src: str
) -> pa.Table:
    df = df.with_columns(
        pl.coalesce(pl.col("text"), strings.strings(df["textId"])).alias("name"),
        _pid("globalTid").alias("_pidkey"),
    )
    # domainId is per process: name it from the DomainCreate row of the same process
    domains = (
        df.filter(pl.col("eventType") == _NVTX_DOMAIN)
        .select("domainId", "_pidkey", pl.col("name").alias("domain"))
        .unique(subset=["domainId", "_pidkey"], keep="last")
    )
    r = df.filter(pl.col("eventType") != _NVTX_DOMAIN).join(
        domains, on=["domainId", "_pidkey"], how="left", maintain_order="left"
    )
    r = _infer_nccl_domain(r, payload, warnings, src)
    r = r.with_columns(
        pl.when(pl.col("eventType") == _NVTX_MARK)
        .then(pl.col("start"))
        .otherwise(pl.col("end"))
        .alias("end"),
        pl.coalesce("int64Value", "uint64Value", "int32Value", "uint32Value").alias("payload_int"),
        pl.coalesce("doubleValue", "floatValue").alias("payload_double"),
        _pid("globalTid").alias("process_id"),
        _tid("globalTid").alias("thread_id"),
        pl.when(pl.col("endGlobalTid").is_not_null())
        .then(_tid("endGlobalTid"))
        .alias("end_thread_id"),
    )
    r = r.with_columns(nesting_depth(r, "start", "end", ["process_id", "thread_id"]).alias("depth"))
    r = r.sort("start", maintain_order=True)
    out = r.select(
        "process_id", "thread_id", "end_thread_id",
        pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        "domain", "name", "depth", "category", "payload_int", "payload_double",
    )  # fmt: skip
    return _finish("nvtx_ranges", out, {"range_kind": _labels(r["eventType"], _RANGE_KINDS)})


def _infer_nccl_domain(
    r: pl.DataFrame, payload: pl.DataFrame, warnings: list[str], src: str
) -> pl.DataFrame:
    """Name the NCCL domain where the export lost its DomainCreate row (time-sliced exports).

    Evidence required: the domain id registered NCCL's payload schemas ("NCCL communicator ID")
    and every range of that (process, domain) is named nccl*.
    """
    nccl_ids = payload.filter(pl.col("name") == "NCCL communicator ID")["domainId"].unique()
    if nccl_ids.is_empty() or r.is_empty():
        return r
    groups = (
        r.filter(
            pl.col("domain").is_null()
            & (pl.col("domainId") != 0)
            & pl.col("domainId").is_in(nccl_ids.implode())
        )
        .group_by("domainId", "_pidkey")
        .agg(pl.col("name").str.starts_with("nccl").all().alias("_all"), pl.len().alias("_n"))
        .filter(pl.col("_all"))
    )
    if groups.is_empty():
        return r
    warnings.append(
        f"{src}: no DomainCreate row for {groups['_n'].sum()} NVTX ranges; named their domain NCCL "
        "(it holds NCCL's payload schemas and only nccl* ranges)"
    )
    inferred = groups.select("domainId", "_pidkey", pl.lit("NCCL").alias("_inferred"))
    return r.join(
        inferred, on=["domainId", "_pidkey"], how="left", maintain_order="left"
    ).with_columns(pl.coalesce("domain", "_inferred").alias("domain"))


def nesting_depth(df: pl.DataFrame, start: str, end: str, by: list[str]) -> pl.Series:
    """Depth of each interval among the intervals of its group (0 = outermost), vectorised.

    Boundary sweep: +1 at each start, -1 at each end; an interval's depth is the number of
    intervals open just before it starts. Ends sort before starts at the same instant, except
    the end of a zero-length interval (a mark), which follows its own start; starts at the same
    instant open the longer interval first. Unclosed intervals never end.
    """
    if df.height == 0:
        return pl.Series("depth", [], dtype=pl.Int32)
    big = 1 << 62
    idx = pl.arange(0, df.height, eager=True).alias("_i")
    base = df.select(
        *by, pl.col(start).alias("_t0"), pl.col(end).fill_null(big).alias("_t1")
    ).with_columns(idx)
    starts = base.select(
        *by, pl.col("_t0").alias("_t"), pl.lit(1).alias("_kind"),
        (-pl.col("_t1")).alias("_tie"), "_i",
        pl.lit(1).alias("_d"),
    )  # fmt: skip
    ends = base.select(
        *by, pl.col("_t1").alias("_t"),
        pl.when(pl.col("_t1") == pl.col("_t0")).then(2).otherwise(0).alias("_kind").cast(pl.Int32),
        pl.lit(0, pl.Int64).alias("_tie"), "_i", pl.lit(-1).alias("_d"),
    )  # fmt: skip
    ev = pl.concat([starts, ends], how="vertical_relaxed").sort([*by, "_t", "_kind", "_tie"])
    ev = ev.with_columns(pl.col("_d").cum_sum().over(by).alias("_open"))
    depth = (
        ev.filter(pl.col("_kind") == 1)
        .select("_i", (pl.col("_open") - 1).cast(pl.Int32).alias("depth"))
        .sort("_i")
    )
    return depth["depth"]


def _devices(
    gpu: pl.DataFrame, seen: pl.Series, has_table: bool, warnings: list[str], src: str
) -> pa.Table:
    out = gpu.select(
        pl.col("id").alias("device_id"),
        "name",
        pl.col("smCount").alias("sm_count"),
        pl.col("totalMemory").alias("memory_bytes"),
        pl.col("busLocation").alias("bus_location"),
        "uuid",
        pl.concat_str(pl.col("computeMajor"), pl.lit("."), pl.col("computeMinor")).alias(
            "compute_capability"
        ),
        pl.col("clockRate").alias("clock_hz"),
    ).unique(subset=["device_id"], keep="first", maintain_order=True)
    extra = seen.unique().sort().filter(~seen.unique().sort().is_in(out["device_id"].implode()))
    if not has_table and len(extra):
        warnings.append(
            f"{src}: no {GPU} table: GPU names and properties are unknown "
            "(devices listed from the events)"
        )
    if len(extra):
        out = pl.concat([out, pl.DataFrame({"device_id": extra})], how="diagonal_relaxed")
    return _finish("devices", out.sort("device_id"), {})


def _syncs(df: pl.DataFrame) -> pa.Table:
    df = _by_start(df)
    out = df.select(
        pl.col("deviceId").alias("device_id"),
        _pid("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        pl.col("eventId").alias("event_id"),
        pl.col("correlationId").alias("correlation_id"),
    )
    return _finish("syncs", out, {"sync_kind": _labels(df["syncType"], _SYNC_KINDS)})


def _enum(df: pl.DataFrame, present: bool, fallback: dict[int, str]) -> dict[int, str]:
    if not present:
        return fallback
    return {int(i): str(lab or name) for i, name, lab in df.iter_rows() if i is not None}


def _short_copy_kinds(labels: dict[int, str]) -> dict[int, str]:
    """ENUM labels read 'Device-to-Device'; keep the conventional short form (DtoD)."""
    return {**labels, **_COPY_KINDS}


def read_nsys(source: Source, path: Path, source_format: str) -> Run:
    """Read every table of an nsys export from `source` into a Run."""
    have = source.tables
    if not is_nsys(have):
        raise InputError(
            f"{path}: not an Nsight Systems export (no nsys tables)",
            "export the report with `nsys export --type sqlite REPORT.nsys-rep`",
        )
    warnings: list[str] = []
    for table, what in [(KERNEL, "kernels"), (RUNTIME, "CUDA API calls"), (NVTX, "NVTX ranges"),
                        (STRINGS, "names (kernel, API and range names will be null)")]:  # fmt: skip
        if table not in have:
            warnings.append(f"{path}: no {table} table: the report has no {what}")
    meta_table = next((t for t in META_TABLES if t in have), META_TABLES[0])
    nvtx_types = (_NVTX_MARK, _NVTX_PUSHPOP, _NVTX_STARTEND, _NVTX_DOMAIN)
    reads = [
        Read(meta_table, _NAME_VALUE), Read(STRINGS, {"id": I64, "value": STR}),
        Read("TARGET_INFO_SESSION_START_TIME", _ints("utcEpochNs")),
        Read("ENUM_CUDA_MEMCPY_OPER", _ENUM_COLS), Read("ENUM_CUDA_MEM_KIND", _ENUM_COLS),
        Read(PAYLOAD_ENTRIES, _PAYLOAD_COLS), Read(GPU, _GPU_COLS),
        Read(KERNEL, _KERNEL_COLS), Read(RUNTIME, _RUNTIME_COLS), Read(MEMCPY, _MEMCPY_COLS),
        Read(MEMSET, _MEMSET_COLS), Read(SYNC, _SYNC_COLS),
        Read(NVTX, _NVTX_COLS, ("eventType", nvtx_types)),
    ]  # fmt: skip
    meta, strs, start, ecopy, emem, payload, gpu, kern, api, cp, ms, sync, nvtx = source.read(reads)
    strings = Strings(strs)
    # cudaLaunchKernel_v7000 -> cudaLaunchKernel, on the string table (not per call)
    clean = pl.Series(strings.values).str.replace(r"_v\d+$", "").to_arrow().cast(pa.string())
    api_names = strings.with_values(clean)
    keys = _launch_keys(api)
    copy_kinds = _short_copy_kinds(_enum(ecopy, "ENUM_CUDA_MEMCPY_OPER" in have, _COPY_KINDS))
    mem_kinds = _enum(emem, "ENUM_CUDA_MEM_KIND" in have, _MEM_KINDS)
    tables = {
        "kernels": _kernels(kern, keys, strings, api_names),
        "memops": _memops(cp, ms, keys, api_names, copy_kinds, mem_kinds),
        "api_calls": _api_table(api, api_names),
        "nvtx_ranges": _nvtx(nvtx, strings, payload, warnings, str(path)),
        "devices": _devices(
            gpu,
            pl.concat([kern["deviceId"], cp["deviceId"], ms["deviceId"]]).drop_nulls(),
            GPU in have,
            warnings,
            str(path),
        ),  # fmt: skip
        "syncs": _syncs(sync),
    }
    tables["collectives"] = nccl.collectives_from(
        tables["kernels"], tables["nvtx_ranges"], tables["api_calls"]
    )
    unnamed = kern["demangledName"].null_count()
    if unnamed:
        warnings.append(
            f"{path}: {unnamed} kernels have no name (NULL demangledName); names are null"
        )
    if strings.missing + api_names.missing:
        warnings.append(
            f"{path}: {strings.missing + api_names.missing} name ids are not in {STRINGS}; "
            "those names are null"
        )
    nvtx_coll = pl.Series(tables["collectives"].column("source").cast(pa.string())).eq("nvtx").sum()
    if nvtx_coll and payload.filter(pl.col("name") == "Message size [bytes]").height:
        warnings.append(
            f"{path}: NCCL NVTX payloads (message sizes) are not decoded; "
            "collectives.bytes from NVTX is null"
        )
    md = dict(zip(meta["name"].to_list(), meta["value"].to_list(), strict=True))
    version = md.get("EXPORT_SCHEMA_VERSION")
    if (
        version
        and version.split(".")[0].isdigit()
        and int(version.split(".")[0]) > _KNOWN_SCHEMA_MAJOR
    ):
        warnings.append(
            f"{path}: nsys export schema {version} is newer than tracediff knows (3.x); "
            "check the result"
        )
    metadata = {
        "source": str(path),
        "source_format": source_format,
        "nsys_version": md.get("EXPORT_PRODUCT_VERSION"),
        "nsys_schema_version": version,
        "time_origin_utc_ns": start["utcEpochNs"][0] if start.height else None,
        "time_base": "nsys session start",
    }
    return Run(tables=tables, metadata=metadata, warnings=warnings)


# Every table read_nsys reads: `nsys export --tables` exports only these (faster, smaller).
TABLES_READ = (
    *META_TABLES, STRINGS, "TARGET_INFO_SESSION_START_TIME", "ENUM_CUDA_MEMCPY_OPER",
    "ENUM_CUDA_MEM_KIND", PAYLOAD_ENTRIES, GPU, KERNEL, RUNTIME, MEMCPY, MEMSET, SYNC, NVTX,
)  # fmt: skip


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
