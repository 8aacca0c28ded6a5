"""Raw nsys tables as polars frames: the `Read` request, the `Source` protocol, SQLite reader.

Stage: parse (nsys), first step. Input: an nsys SQLite export (`SqliteSource`; the Parquet
folder reader `ParquetSource` is in cli.py and answers the same `Read`s). Output: one
polars frame per `Read`, columns in the requested order and types, absent columns as nulls.

A read of integer, real and text columns (the event tables: kernels, CUDA API calls, memcpy,
memset, syncs, CUDA events, NVTX; the string table) is decoded straight from the file's pages by
the native module (pages.py; ~0.2 CPU-s for 1 M kernels x 18 columns, where ADBC took
~1.2), split over the worker threads by leaf page. Every other read, and any table the page
decoder refuses, is pulled as Arrow in one batch (ADBC's SQLite driver; tables spread over a
thread pool, since SQLite readers run concurrently and ADBC releases the GIL; a table that
outweighs all the others split by rowid range), with a stdlib `sqlite3` fallback. No Python loop
runs per row except the UTF-8 repair of a column that has invalid bytes.
`TRACEDIFF_SQLITE_PAGES=0` turns the page decoder off.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl
import pyarrow as pa

from tracediff.base import settings
from tracediff.base.errors import InputError
from tracediff.parse.nsys import pages as sqlite_pages
from tracediff.parse.nsys import wal
from tracediff.parse.nsys.schema import F64, I64, STR

SQLITE_MAGIC = b"SQLite format 3\x00"
# Read types the page decoder produces
_PAGE_KINDS: dict[pl.DataType, str] = {I64: "i", pl.Int32(): "w", F64: "f", STR: "s"}


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


def _without_rowid(sql: str | None) -> bool:
    """Whether a table's CREATE statement (sqlite_master.sql) makes it WITHOUT ROWID: its
    options after the column list's closing parenthesis say so."""
    if not sql or ")" not in sql:
        return False
    return "WITHOUTROWID" in "".join(sql.rsplit(")", 1)[1].upper().split())


class SqliteSource:
    """A read-only nsys SQLite export. Queries run through ADBC (Arrow) with a stdlib fallback."""

    CHUNK_ROWS = 262_144  # a table split into rowid ranges (see _plan) has more rows than this
    SMALL_ROWS = 10_000  # a whole table this small is read through the stdlib (`_small`)

    def __init__(self, path: Path, workers: int | None = None, pages: bool | None = None) -> None:
        self.path = Path(path)
        self.src = str(path)
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._wal_copy: Path | None = None  # a temp folder: the export with its -wal applied
        wal_log = wal.pending_log(self.path, self._check_header())
        if wal_log is not None:
            self._wal_copy = wal.applied_copy(self.path, wal_log, self.src)
            self.path = self._wal_copy / wal.COPY_NAME
        self._uri = f"file:{self.path}?mode=ro&immutable=1"
        try:
            self.con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            names = self.con.execute(
                "SELECT name, rootpage, sql FROM sqlite_master WHERE type='table'"
            ).fetchall()
        except sqlite3.DatabaseError as e:
            if self._wal_copy is not None:
                shutil.rmtree(self._wal_copy, ignore_errors=True)
            raise InputError(
                f"{self.src}: SQLite file is unreadable ({e})",
                "the file may be truncated or corrupt; export the report again",
            ) from None
        self.tables = {n for n, _, _ in names}
        self._no_rowid = {n for n, _, sql in names if _without_rowid(sql)}
        if pages is None:
            pages = settings.sqlite_pages()
        self._pages = None
        if pages and sqlite_pages.AVAILABLE:
            try:
                self._pages = sqlite_pages.PageReader(self.path)
            except (OSError, ValueError):
                self._pages = None
        # b-tree root page of each table (virtual tables have none; a WITHOUT ROWID table's
        # root is an index page, which the page decoder refuses)
        self._roots = {n: r for n, r, _ in names if isinstance(r, int) and r > 0}
        self._cols: dict[str, list[str]] = {}
        self._info: dict[str, list[tuple[Any, ...]]] = {}
        self._plain: dict[str, bool] = {}
        self._local = threading.local()
        self._adbc_cons: list[Any] = []
        self._lock = threading.Lock()
        # one sqlite3 connection, used by the reader threads one query at a time: two threads
        # stepping it at once got each other's rows (an aggregate answered with no row)
        self._con_lock = threading.Lock()
        self._adbc_module: Any = None  # imported on the first read the pages cannot serve
        self._adbc_tried = False

    def _check_header(self) -> bytes:
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
        return head

    def columns(self, table: str) -> list[str]:
        if table not in self._cols:
            self._info[table] = self._exec(f'PRAGMA table_info("{table}")')
            self._cols[table] = [r[1] for r in self._info[table]]
        return self._cols[table]

    def _plain_records(self, table: str) -> bool:
        """Records hold one field per declared column, in order: no generated columns (hidden
        2 or 3 in table_xinfo), which table_info leaves out and records do not store."""
        if table not in self._plain:
            try:
                with self._con_lock:
                    xinfo = self.con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
            except sqlite3.DatabaseError:  # unreadable schema: SQLite itself will say so
                self._plain[table] = False
            else:
                self._plain[table] = all(r[6] == 0 for r in xinfo) and len(xinfo) == len(
                    self.columns(table)
                )
        return self._plain[table]

    def _page_spec(self, read: Read) -> tuple[int, list[str], list[int], list[str], int] | None:
        """(root page, columns present, their record fields and kinds, rowid-alias field) of a
        read the page decoder can serve, or None: reads of integer, real and text columns with no default values (a
        `where_in` filter is applied after decoding, on a column the read includes)."""
        if self._pages is None or read.table not in self._roots:
            return None
        cols = self.columns(read.table)
        info = self._info[read.table]
        have = [c for c in read.cols if c in cols]
        if not have or any(read.cols[c] not in _PAGE_KINDS for c in have):
            return None
        if read.where_in is not None and read.where_in[0] in cols and read.where_in[0] not in have:
            return None
        fields = [cols.index(c) for c in have]
        if any(info[f][4] is not None for f in fields):  # DEFAULT: rows older than the column
            return None
        if not self._plain_records(read.table):
            return None
        pk = [r for r in info if r[5]]
        # a lone INTEGER PRIMARY KEY column is the rowid; its record field is stored as NULL
        ipk = pk[0][0] if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER" else -1
        kinds = [_PAGE_KINDS[read.cols[c]] for c in have]
        return self._roots[read.table], have, fields, kinds, ipk

    def _fetch_pages(self, read: Read) -> pl.DataFrame | None:
        spec = self._page_spec(read)
        if spec is None or self._pages is None:
            return None
        root, have, fields, kinds, ipk = spec
        arrays = self._pages.read(root, fields, kinds, ipk, self.workers)
        if arrays is None:
            return None
        df = pl.from_arrow(_utf8(pa.Table.from_arrays(arrays, names=have)), rechunk=False)
        assert isinstance(df, pl.DataFrame)
        if read.where_in is not None and read.where_in[0] in have:
            df = df.filter(pl.col(read.where_in[0]).is_in(list(read.where_in[1])))
        return typed(df, read, have, self.src)

    def _exec(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            with self._con_lock:
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

    @property
    def _adbc(self) -> Any:
        """ADBC's SQLite driver, or None where it is not installed. Imported on first use:
        the import alone costs 60-80 ms, and a report whose tables all come from the page
        decoder never needs it."""
        if not self._adbc_tried:
            with self._lock:
                if not self._adbc_tried:
                    try:
                        import adbc_driver_sqlite.dbapi as adbc

                        self._adbc_module = adbc
                    except ImportError:
                        self._adbc_module = None
                    self._adbc_tried = True
        return self._adbc_module

    def _adbc_con(self) -> Any:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._adbc.connect(self._uri)
            self._local.con = con
            with self._lock:
                self._adbc_cons.append(con)
        return con

    def _fetch(self, read: Read, rowids: tuple[int, int] | None) -> pl.DataFrame:
        if rowids is None:
            paged = self._fetch_pages(read)
            if paged is not None:
                return paged
        have = [c for c in read.cols if c in set(self.columns(read.table))]
        if not self._small(read.table, rowids) and self._adbc is not None:
            # One batch per query: the driver infers column types from the first batch, so a
            # column NULL for 64k rows and then text fails with smaller ones; and one batch is
            # one chunk (1 M kernels: 0.94 instead of 1.07 CPU-s, and no 0.1 s rechunk copy).
            for batch in (1 << 30,):
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

    def _small(self, table: str, rowids: tuple[int, int] | None) -> bool:
        """A whole table of at most SMALL_ROWS rows the page decoder left (an environment value
        on overflow pages): read through the stdlib, as fast there, and the ADBC driver's import
        (pyarrow.dataset and .compute with it: ~0.15 CPU-s) is not paid for it."""
        if rowids is not None or self._pages is None:  # no pages: ADBC reads, as asked
            return False
        if table in self._no_rowid:  # ADBC reads it, as before 5aa7ae1
            return False
        bounds = self._bounds(table)
        return bounds is None or bounds[1] - bounds[0] < self.SMALL_ROWS

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

    def _bounds(self, table: str) -> tuple[int, int] | None:
        # two queries: SQLite answers a lone min() or max() of rowid from the b-tree ends
        (lo,) = self._exec(f'SELECT min(rowid) FROM "{table}"')[0]
        (hi,) = self._exec(f'SELECT max(rowid) FROM "{table}"')[0]
        return None if lo is None else (lo, hi)

    def _ranges(self, read: Read) -> list[tuple[int, int] | None]:
        bounds = self._bounds(read.table) if self.workers > 1 else None
        if bounds is None or bounds[1] - bounds[0] < self.CHUNK_ROWS:
            return [None]
        lo, hi = bounds
        n = min(self.workers * 2, -(-(hi - lo + 1) // (self.CHUNK_ROWS // 2)))
        step = -(-(hi - lo + 1) // n)
        return [(a, min(a + step - 1, hi)) for a in range(lo, hi + 1, step)]

    def _plan(self, reads: Sequence[Read]) -> list[tuple[int, Read, tuple[int, int] | None]]:
        """Queries to run: one per table, largest first, so the pool's threads (SQLite readers
        run concurrently and ADBC releases the GIL) each take whole tables. A table is split
        into rowid ranges only where it alone outweighs twice all the others: the parts must be
        concatenated and copied into one chunk again (1 M kernels + 1.1 M API calls, both split:
        0.4-0.7 CPU-s more than whole tables)."""
        present = [(i, r) for i, r in enumerate(reads) if r.table in self.tables]
        if self.workers == 1:
            return [(i, r, None) for i, r in present]
        cost = {}
        for i, r in present:
            # a WITHOUT ROWID table has no rowid range to weigh or split (nsys writes none)
            bounds = None if r.table in self._no_rowid else self._bounds(r.table)
            rows = 0 if bounds is None else bounds[1] - bounds[0] + 1
            cost[i] = rows * max(1, sum(c in self.columns(r.table) for c in r.cols))
        total = sum(cost.values())
        tasks = []
        for i, r in sorted(present, key=lambda p: -cost[p[0]]):
            # the page decoder splits a table over the threads itself, without copies
            split = cost[i] > 2 * (total - cost[i]) and self._page_spec(r) is None
            tasks += [(i, r, rng) for rng in (self._ranges(r) if split else [None])]
        return tasks

    def read(self, reads: Sequence[Read]) -> list[pl.DataFrame]:
        tasks = self._plan(reads)
        parts: dict[int, list[tuple[int, pl.DataFrame]]] = {i: [] for i in range(len(reads))}
        if len(tasks) > 1 and self.workers > 1:
            with ThreadPoolExecutor(self.workers) as pool:
                results = list(pool.map(lambda t: self._fetch(t[1], t[2]), tasks))
        else:
            results = [self._fetch(r, rng) for _, r, rng in tasks]
        for (i, _, rng), df in zip(tasks, results, strict=True):
            parts[i].append((rng[0] if rng else 0, df))
        out = []
        for i, r in enumerate(reads):
            if not parts[i]:
                out.append(pl.DataFrame(schema=r.cols))
            elif len(parts[i]) == 1:
                out.append(parts[i][0][1])
            else:
                # one contiguous chunk: every later step (joins, gathers, casts) runs faster on it
                dfs = [df for _, df in sorted(parts[i], key=lambda p: p[0])]
                out.append(pl.concat(dfs, rechunk=False).rechunk())
        return out

    def close(self) -> None:
        self.con.close()
        if self._pages is not None:
            self._pages.close()
        for con in self._adbc_cons:
            con.close()
        self._adbc_cons.clear()
        if self._wal_copy is not None:
            shutil.rmtree(self._wal_copy, ignore_errors=True)
