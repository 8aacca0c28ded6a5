"""Types of the native Kineto traceEvents scanner (_kineto_scan.c); used by parse/kineto/scan.py.

The column buffers are the C side's, handed over without a copy: (address, length in bytes, a
capsule that frees them), for `pyarrow.foreign_buffer(address, length, base=capsule)`.
"""

from typing import Literal, TypeAlias

from typing_extensions import Buffer, CapsuleType

Owned: TypeAlias = tuple[int, int, CapsuleType]
"""A C-allocated buffer: (address, bytes, capsule that frees it)."""

Kind: TypeAlias = Literal["s", "i", "l"]
"""A column's kind: 's' string (int32 offsets + bytes), 'i' int64, 'l' list of int64."""

Column: TypeAlias = (
    tuple[Kind, int, int, Owned | None, Owned, Owned | None]
    | tuple[Literal["d"], int, int, Owned | None, Owned, Owned, Owned]
)
"""(kind, rows, nulls, validity bitmap or None, values or offsets, bytes or list values or None);
a 'd' column (dictionary-encoded strings): (..., int32 codes, the distinct strings' bytes, their
int32 offsets)."""

Part: TypeAlias = tuple[int, dict[int, tuple[Column, ...]], bytes]
"""One part of a piece: (events, role code → its columns in schema order, spans), spans the
(start, end) int64 byte offsets in buf of the cpu_op events returned for Python to decode."""

def scan(
    buf: Buffer,
    start: int,
    stop: int,
    cats: tuple[tuple[bytes, int], ...],
    roles: dict[int, tuple[tuple[bytes, Kind], ...]],
    cpu_op: int,
    closing: bool,
    threads: int,
    exact: bool,
    dict_role: int = 0,
    /,
) -> tuple[list[Part], int] | tuple[str, int]:
    """buf[start:stop], the elements of a JSON array (closing: and its `]`, before stop), read
    into columns: ([one Part per part scanned, in order], offset of the `]` or -1), or
    (reason, offset) when the piece is refused. cats: (category, role code) pairs; roles: for
    each decoded role code, its (args key, kind) pairs; cpu_op: the code whose events are only
    returned as spans; threads: 2 lets a piece of >= 1 MB be scanned as two parts at once;
    exact: times from the decimal text rather than through a double; dict_role: the role code
    whose name column comes dictionary-encoded ('d'), 0 for none; that role's columns have no
    duration_ns (name, pid, tid, start_ns, end_ns)."""

def unify(
    parts: list[tuple[Buffer, int, Buffer, int, Buffer]], /
) -> tuple[Owned, Owned, Owned, int]:
    """Dictionary-encoded parts ((int32 codes, rows, the part's distinct strings' int32 offsets,
    their count, their bytes), ...) as one: (int32 codes into one set of distinct strings, its
    offsets, its bytes, its count). A code outside its part's strings (a null row's) becomes 0.
    ValueError on buffers shorter than said or offsets out of order."""
