"""The run file: one self-describing file holding every table of one profiled run.

Stage: storage between parse and analysis. Input: a `Run`; output: `RUN.arrow`, and back.

Layout (little endian):

    b"TRACEDIFF-RUN\\0\\0\\0"                    16-byte magic
    one Arrow IPC file per table, back to back (lz4-compressed buffers)
    footer: UTF-8 JSON {"format_version", "tables": {name: [offset, length]}, "metadata": {...},
            "warnings": [...], "checksums": {"algorithm": "crc32", "tables": {name: crc},
            "footer": crc}}
    uint64 footer length, then b"TDRUNEND"

Kernels and copies are stored in device-major order (by device, then start, then end; ties as
they came: `DEVICE_MAJOR`), the order the engine aligns ops in. The footer comes last so tables
are streamed to disk one at a time; a file without the end magic is truncated. Reading
memory-maps the file: opening a run reads the footer only, and each table is materialised on
first use.

Integrity (#17): a flipped bit in a memory-mapped Arrow buffer is not noticed by Arrow (it can
segfault, or change a number silently), so every table's IPC bytes carry a CRC-32 and the footer
carries one over its own bytes before `"checksums"` (the key written last). A table's CRC is
checked when it is first read (crc32 runs at ~4 GB/s here, a fraction of the lz4 decompression).
Every table is also fully validated by Arrow on read (offsets, dictionary indices, UTF-8), so
no file, damaged or crafted, reaches polars with buffers that can crash it. Files written before
checksums existed still read; for them a change inside a value cannot be detected, and
`Run.checksums` is False (`info` says so). The footer's strict reading: tracediff/runs/runfooter.py.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from tracediff.base import devorder, outputs
from tracediff.base.errors import InputError, OutputError
from tracediff.runs import schema
from tracediff.runs.deferred import Deferred
from tracediff.runs.runfooter import (
    CHECKSUM_KEY,
    CORRUPT_HINT,
    FOOTER_KEYS,
    CrcWriter,
    check_version,
    footer_checksums,
    table_offsets,
)

MAGIC = b"TRACEDIFF-RUN\x00\x00\x00"
END_MAGIC = b"TDRUNEND"
_TAIL = struct.Struct("<Q")
BATCH_ROWS = 1 << 24
"""Rows of a table's IPC record batch at most: a table of fewer rows reads back as one chunk of
each column, which numpy then reads without a copy (at 1 << 20, a 5 M-kernel run's columns
came back in 5 chunks, each `to_numpy` of them a concatenation)."""
DEVICE_MAJOR = ("kernels", "memops")
"""Tables written in device-major order (device, start, end; ties in the order they came): the
order the engine aligns ops in, so a run file's kernels need no reorder (engine/cycle/ranges.py;
copies, which the engine appends after the kernels, still do)."""
SMALL_TABLE_BYTES = 512 << 10
"""A table whose stored (compressed) bytes are at most this is decoded whole on its first
column read and kept (kernels and memops until `Run.release`, once the engine read its ops):
reading a run (identity, sanity checks, GPUs, the engine's ops) asks for some columns of
kernels and memops ~8 times, and each read of a small table is mostly fixed cost (open,
validate, CRC): 3.3 % of the demo compare's instructions (callgrind, 8 runs of 5 k kernels).
A kept table is ~3 MB at most (~20 k kernels); bigger tables are read column by column,
uncached, as before, so a run set of big runs holds none of them."""
RECORDS = "record_counts"
"""The footer metadata key of `Run.record_counts` (taken out of `Run.metadata` when read)."""
_OPS_TABLES = {"kernels", "memops"}
"""What `Run.release` lets go of a run's kept small tables: the GPU operations, read once into
the engine's ops frame; the rest (ranges, collectives, devices) are read again by the cut."""


@dataclass
class Run:
    """One profiled run: its tables and metadata (source, tool versions, capture manifest)."""

    tables: dict[str, pa.Table]
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    checksums: bool | None = None
    """True: read from a run file whose tables carry checksums (each verified when read); False:
    an older run file without them; None: not read from a run file."""
    record_counts: dict[str, Any] | None = None
    """What parse/sanity.py counted of these very tables when it checked them (per table of GPU
    records), kept with the run: a run file carries them in its footer's metadata (`RECORDS`),
    so reading it back does not decode its biggest columns again to count what was counted.
    Not carried to a run made from other tables (a new `Run`)."""

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """A table without keeping it cached: for one-pass consumers of big tables (the engine's
        op extraction, export), so a memory-mapped run does not hold every table it ever read.
        An in-memory run (parsed from a report) returns its table as is. `columns`: only these
        (a memory-mapped run then decompresses only their buffers)."""
        if isinstance(self.tables, _LazyTables):
            t = (
                self.tables.load_uncached(name, columns)
                if name in self.tables
                else schema.empty(name)
            )
        elif isinstance(self.tables, Deferred) and name in self.tables:
            t = self.tables.read(name, columns)  # a Partial table's made columns, where enough
        else:
            t = self.table(name)
        return t if columns is None else t.select(columns)

    def table(self, name: str) -> pa.Table:
        t = self.tables.get(name)
        return schema.empty(name) if t is None else t

    def release(self) -> None:
        """Drop the memory-mapped file's pages from this process's resident memory (they stay in
        the page cache; a later read faults them back in). For after the big tables are read."""
        if isinstance(self.tables, _LazyTables):
            self.tables.release()

    @property
    def path(self) -> str:
        """The file the user gave for this run (the run file, else the report it was parsed from)."""
        return str(self.metadata.get("run_file") or self.metadata.get("source") or "run")

    @property
    def label(self) -> str:
        return str(self.metadata.get("label") or Path(str(self.metadata.get("source", "run"))).stem)


class Reread(Run):
    """A run whose tables were let go once what was needed of them was taken (engine/inputs.py:
    base's report, reduced before head is read): `read` gives them again, once, on first use
    (a redo of the run's per-file stage, which is rare). Metadata and warnings stay this run's."""

    def __init__(self, run: Run, read: Callable[[], Run]) -> None:
        self._read = read
        self._loaded = False
        super().__init__({}, run.metadata, run.warnings, run.checksums, run.record_counts)

    @property
    def tables(self) -> dict[str, pa.Table]:
        if not self._loaded:
            self._tables, self._loaded = self._read().tables, True
        return self._tables

    @tables.setter
    def tables(self, value: dict[str, pa.Table]) -> None:
        self._tables = value

    @property
    def reread(self) -> bool:
        """Whether the tables were read again."""
        return self._loaded


def let_go(run: Run, read: Callable[[], Run]) -> None:
    """`run`'s tables dropped in place (whoever holds the run keeps holding it, not them): a
    table asked for later is read again, every table at once, by `read` (engine/compare.py: a
    report's run once its per-file stage is done, so that its ~0.2 GB a side at 0.9 M kernels is
    not held through the join)."""
    tables = run.tables
    names = tables.names() if isinstance(tables, Deferred) else list(tables)
    again = Reread(run, read)  # reads once, on its first table (Deferred builds one at a time)
    run.tables = Deferred({name: functools.partial(again.table, name) for name in names})


def write_run(
    run: Run, path: Path, *, force: bool = False, txn: outputs.Transaction | None = None
) -> None:
    """Write `run` to `path` atomically: a temp file in the same folder, then published without
    replacing anything unless `force` (tracediff.base.outputs: exclusive even against a concurrent
    writer of the same path)."""
    path = Path(path)
    if path.exists() and not force:
        raise OutputError(f"{path}: already exists", "pass --force to overwrite it")
    if path.is_dir():
        raise OutputError(f"{path}: is a directory", "give a file name such as run.arrow")
    if path.exists() and not path.is_file():  # the rename below would replace a FIFO or /dev/null
        raise OutputError(f"{path}: not a regular file", "give a file name such as run.arrow")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"{path}: folder {parent} does not exist", "create it first")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise OutputError(
            f"{path}: cannot create a file in {parent}: {e.strerror or e}",
            "check the folder's permissions",
        ) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a run file is an ordinary file
        with os.fdopen(fd, "wb") as f:
            _write(run, f)
            f.flush()
            os.fsync(f.fileno())
        outputs.publish(Path(tmp), path, force=force, txn=txn)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(
            f"{path}: cannot write run file: {e.strerror or e}", "check free space and permissions"
        ) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write(run: Run, f: Any) -> None:
    f.write(MAGIC)
    offsets: dict[str, list[int]] = {}
    crcs: dict[str, int] = {}
    options = ipc.IpcWriteOptions(compression="lz4")
    for name in schema.TABLES:
        table = stored(name, run.table(name))
        start = f.tell()
        sink = CrcWriter(f)
        with ipc.new_file(sink, table.schema, options=options) as w:
            w.write_table(table, max_chunksize=BATCH_ROWS)
        offsets[name] = [start, f.tell() - start]
        crcs[name] = sink.crc
    body = orjson.dumps(
        {
            "format_version": schema.FORMAT_VERSION,
            "tables": offsets,
            "metadata": _footer_metadata(run),
            "warnings": run.warnings,
        },
        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
    )
    checks = {"algorithm": "crc32", "tables": crcs, "footer": zlib.crc32(body)}
    footer = body[:-1] + CHECKSUM_KEY + orjson.dumps(checks) + b"}"
    f.write(footer)
    f.write(_TAIL.pack(len(footer)))
    f.write(END_MAGIC)


def stored(name: str, table: pa.Table) -> pa.Table:
    """Table `name` as a run file stores it, and reads it back: conformed to its schema, one
    dictionary per column (an IPC file holds one: chunks with their own, a table built from
    several parts, are remapped onto one), kernels and copies device-major."""
    table = schema.conform(name, table).unify_dictionaries()
    return _device_major(table) if name in DEVICE_MAJOR else table


def _device_major(table: pa.Table) -> pa.Table:
    """`table`'s rows in device-major order (base/devorder.py; ties as they came), unless a row
    lacks its device, start or end (then as they came)."""
    cols = [table.column(c) for c in ("device_id", "start_ns", "end_ns")]
    if table.num_rows < 2 or any(c.null_count for c in cols):
        return table
    order = devorder.device_major(*(c.to_numpy() for c in cols))
    if order[0] == 0 and (np.diff(order) == 1).all():
        return table
    return table.take(order)


def _footer_metadata(run: Run) -> dict[str, Any]:
    """The run's metadata and, where it was checked, its record counts (never a key of that
    name that came in with metadata from elsewhere)."""
    meta = {k: v for k, v in run.metadata.items() if k != RECORDS}
    return meta | ({RECORDS: run.record_counts} if run.record_counts else {})


def is_run_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class _LazyTables(dict[str, pa.Table]):
    """Tables of a memory-mapped run file, read on first access."""

    def __init__(
        self,
        buf: Any,
        offsets: dict[str, list[int]],
        source: str,
        crcs: dict[str, int] | None,
        version: int = schema.FORMAT_VERSION,
    ) -> None:
        super().__init__()
        self._version = version  # < 2: kernels/memops without stack_id (schema.upgrade)
        self._buf = buf
        self._offsets = offsets
        self._source = source
        self._crcs = crcs  # None: a file without checksums, validated by Arrow instead
        self._verified: set[str] = set()
        self._small: set[str] = set()  # kept by a column read (SMALL_TABLE_BYTES)

    def release(self) -> None:
        for name in self._small & _OPS_TABLES:  # decoded again if asked for again
            dict.pop(self, name, None)
        self._small -= _OPS_TABLES
        with contextlib.suppress(AttributeError, OSError, ValueError):  # no madvise: nothing lost
            self._buf.madvise(mmap.MADV_DONTNEED)

    def load_uncached(self, name: str, columns: list[str] | None = None) -> pa.Table:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if columns is not None and self._offsets[name][1] <= SMALL_TABLE_BYTES:
            self._small.add(name)  # decoded once, kept until `release`: see SMALL_TABLE_BYTES
            return self._load(name).select(columns)
        return self._load(name, cache=False, columns=columns)

    def _verify(self, name: str, off: int, length: int) -> None:
        if self._crcs is None or name in self._verified:
            return
        with memoryview(self._buf) as view:
            crc = zlib.crc32(view[off : off + length])
        if crc != self._crcs[name]:
            raise InputError(
                f"{self._source}: table {name!r} is damaged (its checksum does not match)",
                CORRUPT_HINT,
            )
        self._verified.add(name)

    def _load(self, name: str, cache: bool = True, columns: list[str] | None = None) -> pa.Table:
        off, length = self._offsets[name]
        self._verify(name, off, length)
        try:
            buf = pa.py_buffer(self._buf)[off : off + length]
            old = self._version < 2 and name in schema.ADDED_IN_2
            if columns is None:
                table = ipc.open_file(buf).read_all()
            else:  # validate the whole schema, decompress only the columns asked for
                full = ipc.open_file(buf).schema
                schema.validate_schema(name, full, self._source, old=old)
                have = [c for c in columns if full.get_field_index(c) >= 0 or not old]
                fields = [full.get_field_index(c) for c in have]
                opts = ipc.IpcReadOptions(included_fields=fields)
                table = ipc.open_file(buf, options=opts).read_all()
            # offsets, dictionary indices, UTF-8: a crafted file can carry a matching CRC, and
            # a bad index segfaults polars later (~4 % of a full read: 18 of 430 ms on 44 MB)
            table.validate(full=True)
        except (pa.ArrowException, OSError, ValueError, IndexError, OverflowError) as e:
            detail = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            raise InputError(
                f"{self._source}: table {name!r} is corrupt ({detail})", CORRUPT_HINT
            ) from None
        if old:
            if columns is None:
                schema.validate_schema(name, table.schema, self._source, old=True)
            table = schema.upgrade(name, table)
        if columns is not None:
            return table.select(columns)
        schema.validate(name, table, self._source)
        if cache:
            dict.__setitem__(self, name, table)
        return table

    def __getitem__(self, name: str) -> pa.Table:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        if name in self._offsets:
            return self._load(name)
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return name in self._offsets

    def keys(self) -> Any:
        return self._offsets.keys()

    def items(self) -> Iterator[tuple[str, pa.Table]]:  # type: ignore[override]
        for name in self._offsets:
            yield name, self[name]


def read_run(path: Path) -> Run:
    """Open a run file. Raises InputError with a one-line message on anything wrong."""
    path = Path(path)
    src = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(MAGIC) + _TAIL.size + len(END_MAGIC):
                raise InputError(
                    f"{src}: too short to be a tracediff run file", "parse the report again"
                )
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise InputError(
            f"{src}: cannot read: {e.strerror or e}", "check the path and permissions"
        ) from None
    if buf[: len(MAGIC)] != MAGIC:
        raise InputError(
            f"{src}: not a tracediff run file",
            "make one with `tracediff parse REPORT -o RUN.arrow`",
        )
    if buf[-len(END_MAGIC) :] != END_MAGIC:
        raise InputError(
            f"{src}: run file is truncated (no end marker)",
            "copy it again or parse the report again",
        )
    (flen,) = _TAIL.unpack(buf[-len(END_MAGIC) - _TAIL.size : -len(END_MAGIC)])
    fstart = size - len(END_MAGIC) - _TAIL.size - flen
    if flen <= 0 or fstart < len(MAGIC):
        raise InputError(f"{src}: run file footer is corrupt", CORRUPT_HINT)
    raw = bytes(buf[fstart : fstart + flen])
    try:
        footer = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InputError(f"{src}: run file footer is corrupt", CORRUPT_HINT) from None
    if not isinstance(footer, dict):
        raise InputError(f"{src}: run file footer is corrupt", CORRUPT_HINT)
    version = check_version(footer.get("format_version"), src)
    unknown = sorted(set(footer) - FOOTER_KEYS)
    if unknown:  # a flipped bit in "checksums" would otherwise read as an older, unchecked file
        raise InputError(
            f"{src}: run file footer is corrupt (unknown key {unknown[0]!r})", CORRUPT_HINT
        )
    crcs = footer_checksums(footer, raw, src)
    offsets = table_offsets(footer.get("tables"), fstart, src, legacy=crcs is None, version=version)
    if crcs is not None and set(crcs) != set(offsets):
        raise InputError(f"{src}: run file footer is corrupt", CORRUPT_HINT)
    tables = _LazyTables(buf, offsets, src, crcs, version)
    metadata, warnings = footer.get("metadata", {}), footer.get("warnings", [])
    if not isinstance(metadata, dict) or not isinstance(warnings, list):
        raise InputError(f"{src}: run file footer is corrupt", CORRUPT_HINT)
    metadata = dict(metadata)
    metadata.setdefault("run_file", src)
    counts = metadata.pop(RECORDS, None)
    return Run(
        tables=tables,
        metadata=metadata,
        warnings=[str(w) for w in warnings],
        checksums=crcs is not None,
        record_counts=counts if isinstance(counts, dict) else None,
    )


def footer_span(data: Any) -> tuple[int, int]:
    """(start, end) of the JSON footer in a run file's bytes (the end magic checked by the caller)."""
    (flen,) = _TAIL.unpack(data[-len(END_MAGIC) - _TAIL.size : -len(END_MAGIC)])
    end = len(data) - len(END_MAGIC) - _TAIL.size
    return end - flen, end
