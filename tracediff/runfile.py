"""The run file: one self-describing file holding every table of one profiled run.

Stage: storage between parse and analysis. Input: a `Run`; output: `RUN.arrow`, and back.

Layout (little endian):

    b"TRACEDIFF-RUN\\0\\0\\0"                    16-byte magic
    one Arrow IPC file per table, back to back (lz4-compressed buffers)
    footer: UTF-8 JSON {"format_version", "tables": {name: [offset, length]}, "metadata": {...}}
    uint64 footer length, then b"TDRUNEND"

The footer comes last so tables are streamed to disk one at a time; a file without the end magic
is truncated. Reading memory-maps the file: opening a run reads the footer only, and each table
is materialised on first use.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc as ipc

from tracediff import schema
from tracediff.errors import InputError, OutputError, UnsupportedVersionError

MAGIC = b"TRACEDIFF-RUN\x00\x00\x00"
END_MAGIC = b"TDRUNEND"
_TAIL = struct.Struct("<Q")


@dataclass
class Run:
    """One profiled run: its tables and metadata (source, tool versions, capture manifest)."""

    tables: dict[str, pa.Table]
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

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


def write_run(run: Run, path: Path, *, force: bool = False) -> None:
    """Write `run` to `path` atomically: a temp file in the same folder, then rename."""
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
        os.replace(tmp, path)
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
    options = ipc.IpcWriteOptions(compression="lz4")
    for name in schema.TABLES:
        # an IPC file holds one dictionary per column: chunks with their own (a table built
        # from several parts) are remapped onto one
        table = schema.conform(name, run.table(name)).unify_dictionaries()
        start = f.tell()
        with ipc.new_file(f, table.schema, options=options) as w:
            w.write_table(table, max_chunksize=1 << 20)
        offsets[name] = [start, f.tell() - start]
    footer = orjson.dumps(
        {
            "format_version": schema.FORMAT_VERSION,
            "tables": offsets,
            "metadata": run.metadata,
            "warnings": run.warnings,
        },
        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
    )
    f.write(footer)
    f.write(_TAIL.pack(len(footer)))
    f.write(END_MAGIC)


def is_run_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


class _LazyTables(dict[str, pa.Table]):
    """Tables of a memory-mapped run file, read on first access."""

    def __init__(self, buf: Any, offsets: dict[str, list[int]], source: str) -> None:
        super().__init__()
        self._buf = buf
        self._offsets = offsets
        self._source = source

    def release(self) -> None:
        with contextlib.suppress(AttributeError, OSError, ValueError):  # no madvise: nothing lost
            self._buf.madvise(mmap.MADV_DONTNEED)

    def load_uncached(self, name: str, columns: list[str] | None = None) -> pa.Table:
        if dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        return self._load(name, cache=False, columns=columns)

    def _load(self, name: str, cache: bool = True, columns: list[str] | None = None) -> pa.Table:
        off, length = self._offsets[name]
        try:
            buf = pa.py_buffer(self._buf)[off : off + length]
            if columns is None:
                table = ipc.open_file(buf).read_all()
            else:  # validate the whole schema, decompress only the columns asked for
                full = ipc.open_file(buf).schema
                schema.validate_schema(name, full, self._source)
                fields = [full.get_field_index(c) for c in columns]
                opts = ipc.IpcReadOptions(included_fields=fields)
                table = ipc.open_file(buf, options=opts).read_all()
        except (pa.ArrowInvalid, OSError, ValueError) as e:
            raise InputError(
                f"{self._source}: table {name!r} is corrupt ({e})", "parse the report again"
            ) from None
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
        raise InputError(f"{src}: run file footer is corrupt", "parse the report again")
    try:
        footer = orjson.loads(buf[fstart : fstart + flen])
        version = int(footer["format_version"])
        offsets = {str(k): [int(v[0]), int(v[1])] for k, v in footer["tables"].items()}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
        raise InputError(f"{src}: run file footer is corrupt", "parse the report again") from None
    if version > schema.FORMAT_VERSION:
        raise UnsupportedVersionError(
            f"{src}: run file format {version} is newer than this tracediff reads ({schema.FORMAT_VERSION})",
            "upgrade tracediff, or parse the report again with this version",
        )
    for name, (off, length) in offsets.items():
        if off < len(MAGIC) or off + length > fstart:
            raise InputError(
                f"{src}: table {name!r} lies outside the file", "parse the report again"
            )
    tables = _LazyTables(buf, {k: v for k, v in offsets.items() if k in schema.TABLES}, src)
    metadata, warnings = footer.get("metadata") or {}, footer.get("warnings") or []
    if not isinstance(metadata, dict) or not isinstance(warnings, list):
        raise InputError(f"{src}: run file footer is corrupt", "parse the report again")
    metadata = dict(metadata)
    metadata.setdefault("run_file", src)
    return Run(tables=tables, metadata=metadata, warnings=[str(w) for w in warnings])
