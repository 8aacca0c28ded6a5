"""Numeric columns of an SQLite table read straight from the file's pages (native module).

Stage: parse (nsys), the fast path of `nsys_source.SqliteSource` for the big event tables.
Input: the SQLite file (memory-mapped), a table's root page and the record fields wanted with
their kinds (int64 or float64). Output: one Arrow array per field, in rowid order: exactly what
`SELECT fields FROM table` returns through SQLite, nulls included.

`_sqlite_pages.c` walks the table b-tree to its leaf pages, then decodes every cell of a range
of leaves into preallocated column buffers with the GIL released; here the leaves are cut into
one range per worker thread by their cell counts, so no part is copied or concatenated after.
It refuses (ValueError, and `read` returns None) anything but the plain case: text, a blob or a
real where an integer is wanted, records that spill into overflow pages, a page that is not a
table b-tree page, an offset outside its page. The caller then reads through SQLite, so
malformed files keep SQLite's own errors. The caller checks what the pages alone cannot tell:
no default value on a wanted column (old rows would lack it), no generated columns, and which
column aliases the rowid.

Without a C compiler at install time the module is absent: `AVAILABLE` is False and every table
is read through SQLite (ADBC), ~4x slower on the kernel table (bench/README.md).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa

try:
    from tracediff.parse import _sqlite_pages as _native  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - built by `pip install` wherever a compiler exists
    _native = None

AVAILABLE = _native is not None
_SPLIT_ROWS = 1 << 16  # a table with fewer rows decodes on one thread


class PageReader:
    """One SQLite file mapped read-only; numeric columns of its tables from the pages."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def close(self) -> None:
        self._mm.close()

    def read(
        self,
        root: int,
        fields: Sequence[int],
        kinds: Sequence[str],
        ipk: int = -1,
        workers: int = 1,
    ) -> list[pa.Array] | None:
        """Arrays of record `fields` (kinds 'i' int64 / 'f' float64) of the table rooted at
        page `root`, in rowid order; `ipk` is the field that aliases the rowid (-1: none).
        None where the table is not the plain case (module docstring)."""
        if _native is None or not fields:
            return None
        try:
            raw_leaves, raw_counts = _native.leaves(self._mm, root)
        except ValueError:
            return None
        leaves = np.frombuffer(raw_leaves, np.uint32)
        ends = np.cumsum(np.frombuffer(raw_counts, np.uint32), dtype=np.int64)
        rows = int(ends[-1]) if len(ends) else 0
        firsts = np.concatenate([[0], ends])
        types = [pa.float64() if k == "f" else pa.int64() for k in kinds]
        values = [np.empty(rows, np.float64 if k == "f" else np.int64) for k in kinds]
        valid = [np.empty(rows, np.uint8) for _ in kinds]
        parts = max(1, min(workers, rows // _SPLIT_ROWS))
        cuts = np.searchsorted(ends, np.arange(1, parts) * (rows // parts), side="right")
        edges = sorted({0, *(int(c) for c in cuts), len(leaves)})
        spec = (tuple(int(f) for f in fields), "".join(kinds).encode(), int(ipk))

        def part(k: int) -> tuple[int, tuple[int, ...]] | None:
            a, b = edges[k], edges[k + 1]
            try:
                n, nulls = _native.decode(
                    self._mm, leaves[a:b], *spec, tuple(values), tuple(valid), int(firsts[a])
                )
            except ValueError:
                return None
            return (n, nulls) if n == firsts[b] - firsts[a] else None

        if len(edges) > 2:
            with ThreadPoolExecutor(len(edges) - 1) as pool:
                done = list(pool.map(part, range(len(edges) - 1)))
        else:
            done = [part(0)] if len(edges) == 2 else [(0, tuple(0 for _ in kinds))]
        if any(d is None for d in done):
            return None
        nulls: list[int] = [sum(col) for col in zip(*(d[1] for d in done if d), strict=True)]
        out = []
        for t, v, m, n in zip(types, values, valid, nulls, strict=True):
            bitmap = None if n == 0 else pa.py_buffer(np.packbits(m, bitorder="little"))
            out.append(pa.Array.from_buffers(t, rows, [bitmap, pa.py_buffer(v)], null_count=n))
        return out
