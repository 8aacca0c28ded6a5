"""Columns of an SQLite table read straight from the file's pages (native module).

Stage: parse (nsys), the fast path of `source.SqliteSource` for the big tables.
Input: the SQLite file (memory-mapped), a table's root page and the record fields wanted with
their kinds (int64, int32, float64 or text). Output: one Arrow array per field, in rowid order:
exactly what `SELECT fields FROM table` returns through SQLite, nulls included.

`_sqlite_pages.c` walks the table b-tree to its leaf pages, then decodes every cell of a range
of leaves into preallocated column buffers with the GIL released; here the leaves are cut into
one range per worker thread by their cell counts, so no part is copied or concatenated after.
It refuses (ValueError, and `read` returns None) anything but the plain case: text or a blob
where a number is wanted, a number where text is, a real where an integer is, an int32 column
value outside int32, records that spill into overflow pages, a page that is not a table b-tree
page, an offset outside its page. The caller then reads through SQLite, so
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

from tracediff.base import blocks

try:
    from tracediff.parse.nsys import _sqlite_pages as _native
except ImportError:  # pragma: no cover - built by `pip install` wherever a compiler exists
    _native = None  # type: ignore[assignment]  # the stub types the built module

AVAILABLE = _native is not None
_TYPES = {"i": pa.int64(), "w": pa.int32(), "f": pa.float64(), "s": pa.large_string()}
_NUMPY = {"i": np.int64, "w": np.int32, "f": np.float64, "s": np.int64}
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
        """Arrays of record `fields` (kinds 'i' int64, 'w' int32, 'f' float64, 's' text as
        large_string, bytes unchecked: the caller validates UTF-8) of the table rooted at page
        `root`, in rowid order; `ipk` is the field that aliases the rowid (-1: none). None
        where the table is not the plain case (module docstring)."""
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
        types = [_TYPES[k] for k in kinds]
        # a text column's values are its Arrow offsets: 0, then each row's end (written by C)
        values = _arena([(rows + (k == "s"), _NUMPY[k]) for k in kinds])
        for k, v in zip(kinds, values, strict=True):
            if k == "s":
                v[0] = 0
        targets = tuple(v[1:] if k == "s" else v for k, v in zip(kinds, values, strict=True))
        parts = max(1, min(workers, rows // _SPLIT_ROWS))
        cuts = np.searchsorted(ends, np.arange(1, parts) * (rows // parts), side="right")
        edges = sorted({0, *(int(c) for c in cuts), len(leaves)})
        spec = (tuple(int(f) for f in fields), "".join(kinds).encode(), int(ipk))

        def part(k: int) -> tuple[int, tuple[bytes, ...], tuple[bytes, ...]] | None:
            a, b = edges[k], edges[k + 1]
            try:
                n, nulls, texts = _native.decode(
                    self._mm, leaves[a:b], *spec, targets, int(firsts[a])
                )
            except ValueError:
                return None
            return (n, nulls, texts) if n == firsts[b] - firsts[a] else None

        if len(edges) > 2:
            with ThreadPoolExecutor(len(edges) - 1) as pool:
                done = list(pool.map(part, range(len(edges) - 1)))
        else:
            empty = (b"",) * len(kinds)
            done = [part(0)] if len(edges) == 2 else [(0, empty, empty)]
        if any(d is None for d in done):
            return None
        got = [d for d in done if d is not None]
        out = []
        for j, (t, v) in enumerate(zip(types, values, strict=True)):
            nulls = [np.frombuffer(d[1][j], np.int64) for d in got if d[1][j]]
            bitmap, n = None, sum(len(x) for x in nulls)
            if n:
                valid = np.ones(rows, bool)
                for x in nulls:
                    valid[x] = False
                bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
            if kinds[j] != "s":
                out.append(pa.Array.from_buffers(t, rows, [bitmap, pa.py_buffer(v)], null_count=n))
                continue
            shift = 0  # each part counted its offsets from its own first byte
            for i, d in enumerate(got):
                if i and shift:
                    v[1 + int(firsts[edges[i]]) : 1 + int(firsts[edges[i + 1]])] += shift
                shift += len(d[2][j])
            data = got[0][2][j] if len(got) == 1 else b"".join(d[2][j] for d in got)
            out.append(
                pa.Array.from_buffers(
                    t, rows, [bitmap, pa.py_buffer(v), pa.py_buffer(data)], null_count=n
                )
            )
        return out


def _arena(shapes: list[tuple[int, type]]) -> list[np.ndarray]:
    """Column arrays carved from one allocation, each 64-byte aligned: one big block is backed
    by 2 MiB pages (numpy advises huge pages), where a dozen separate 8 MB arrays each take
    ~1,000 4 KiB page faults (~10 us apiece on this VM)."""
    sizes = [n * np.dtype(t).itemsize for n, t in shapes]
    offsets = np.concatenate([[0], np.cumsum([-(-b // 64) * 64 for b in sizes])]).tolist()
    block = blocks.take(int(offsets[-1]) + 64)  # a freed block's pages again (base/blocks.py)
    first = -block.ctypes.data % 64
    return [
        block[first + a : first + a + b].view(t)
        for (n, t), a, b in zip(shapes, offsets[:-1], sizes, strict=True)
    ]
