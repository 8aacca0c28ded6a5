"""Types of the native SQLite page decoder (_sqlite_pages.c); used by parse/nsys/pages.py.

Both functions raise ValueError, naming what they refuse, where the file or the table is not the
plain case the C source describes; the caller then reads the table through SQLite.
"""

from typing import Any, TypeAlias

import numpy as np
from typing_extensions import Buffer

Bytes: TypeAlias = Buffer | np.ndarray[Any, Any]
"""Any object with the buffer protocol (numpy's stubs declare it on arrays only from 3.12 on)."""

def leaves(file: Buffer, root: int, /) -> tuple[bytes, bytes]:
    """The leaf pages of the table b-tree rooted at page `root`, in key order, and each leaf's
    cell count: two arrays of uint32 as bytes."""

def decode(
    file: Buffer,
    leaves: Bytes,
    fields: tuple[int, ...],
    kinds: Buffer,
    ipk: int,
    values: tuple[Bytes, ...],
    row0: int,
    /,
) -> tuple[int, tuple[bytes, ...], tuple[bytes, ...]]:
    """Record `fields` of every cell of `leaves` (uint32 page numbers) into the writable
    `values` buffers (one per field, 8 bytes a row, 4 for kind b'w'), from row `row0` on.
    kinds: one byte per field, b'i' int64, b'w' int32, b'f' float64, b's' text (its values are
    the end offsets of each row's bytes); ipk: the field that aliases the rowid, or -1.
    Returns (rows decoded, per field the NULL rows as int64 bytes, per field the text bytes
    (b"" for numeric fields))."""
