"""A piece of the traceEvents array → per-role Arrow columns in one native pass (_kineto_scan.c).

Stage: parse (inside the Kineto reader), the fast path of events.chunks + roles.Roles. Input:
the window buffer and a piece's bounds (the elements of a JSON array); output: a `Scanned` --
the piece's event count, for each role the columns the Python path (roles.Roles) would have
appended (same names, types and values: both take them from fields.py), and the few operators
Python reads (ProfilerStep#N, record_param_comms) as msgspec event records -- or None when the C
side refuses the piece, which the caller then decodes with msgspec as before. The C source lists what it refuses; refusing is always safe.

`TRACEDIFF_KINETO_SCAN=0` turns it off; without a compiler the module is missing and every piece
goes through msgspec.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal, NamedTuple

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.base import settings

from .fields import (
    ARG_FIELDS,
    ARG_KEYS,
    CODED_NAMES,
    INT_LIST,
    ROLE_CODE,
    ROLE_NAMES,
    dtype,
    schema,
)

try:
    from tracediff.parse.kineto import _kineto_scan
except ImportError:  # pragma: no cover - built by pip install; a bare checkout still parses
    _kineto_scan = None  # type: ignore[assignment]  # the stub types the built module

ENABLED = _kineto_scan is not None and settings.kineto_scan()
THREADS = settings.kineto_threads()
"""A piece of >= 1 MB is scanned as two parts on two threads (the C side releases the GIL);
$TRACEDIFF_KINETO_THREADS=1 keeps one (bench/kineto_ingest.py --configs)."""
REFUSED: Counter[str] = Counter()
"""Why pieces were refused in this process (reason → pieces): for tests and bench/."""

_CPU_OP = ROLE_NAMES.index("cpu_op") + 1
_CODED = ROLE_NAMES.index(CODED_NAMES) + 1  # its names come dictionary-encoded ('d')
CODES = _kineto_scan is not None and "dict_role" in (_kineto_scan.scan.__doc__ or "")
"""Whether the built module encodes names ('d' columns); a build older than the C source (a
checkout updated without `make setup`) does not: its plain names are encoded here instead."""
_CATS = tuple((cat.encode(), code) for cat, code in ROLE_CODE.items())


def _kind(field: str) -> Literal["s", "i", "l"]:
    d = dtype(field)
    return "l" if d == INT_LIST else "i" if d == pl.Int64() else "s"


_DECODED = [r for r in ROLE_NAMES if r != "cpu_op"]
_SPEC = {
    ROLE_NAMES.index(r) + 1: tuple((ARG_KEYS[f].encode(), _kind(f)) for f in ARG_FIELDS[r])
    for r in _DECODED
}
_COLUMNS = {r: tuple(schema(r)) for r in _DECODED}  # the C side's column order is the frame's
_TYPES = {
    "s": pa.string(),
    "i": pa.int64(),
    "l": pa.list_(pa.int64()),
}


class Scanned(NamedTuple):
    events: int
    roles: dict[str, dict[str, list[pa.Array]]]  # role → column → arrays (fields.schema order)
    ops: list[Any]  # cpu_op event records Python reads (msgspec records, trace order)
    close: int  # closing scans: the offset of the array's `]`


def _buffer(owned: tuple[int, int, Any] | None) -> pa.Buffer | None:
    """A C-allocated column buffer (address, bytes, capsule that frees it), without a copy."""
    if owned is None:
        return None
    address, size, capsule = owned
    return pa.foreign_buffer(address, size, base=capsule)


def _array(col: tuple[Any, ...]) -> pa.Array:
    kind, rows, nulls, valid, a, b = col[:6]
    bufs = [_buffer(valid), _buffer(a)]
    if kind == "d":  # int32 codes, and the distinct strings (offsets col[6], bytes b)
        codes = pa.Array.from_buffers(pa.int32(), rows, bufs, null_count=nulls)
        n = col[6][1] // 4 - 1
        strings = pa.Array.from_buffers(pa.string(), n, [None, _buffer(col[6]), _buffer(b)])
        return pa.DictionaryArray.from_arrays(codes, strings)
    if kind == "s":
        return pa.Array.from_buffers(_TYPES[kind], rows, [*bufs, _buffer(b)], null_count=nulls)
    if kind == "l":
        values = pa.Array.from_buffers(pa.int64(), b[1] // 8, [None, _buffer(b)])
        return pa.Array.from_buffers(_TYPES[kind], rows, bufs, null_count=nulls, children=[values])
    return pa.Array.from_buffers(_TYPES[kind], rows, bufs, null_count=nulls)


def unify_names(parts: list[pa.DictionaryArray]) -> pa.DictionaryArray | None:
    """The Python calls' name arrays of several pieces as one dictionary array, unified in C
    (`_kineto_scan.unify`: one pass over the codes, each piece's distinct names looked up once);
    None where the module lacks it or an array is sliced (then pa.concat_arrays unifies).
    Pyarrow's unification cost ~0.5 ms of the SGLang prefill-decode trace's parse, and 5-7 ms
    in some fresh processes."""
    unify = getattr(_kineto_scan, "unify", None)
    if unify is None or any(p.offset or p.dictionary.offset for p in parts):
        return None
    spec = []
    for p in parts:
        words = p.dictionary
        _, offsets, data = words.buffers()
        spec.append((p.indices.buffers()[1], len(p), offsets, len(words), data or b""))
    codes, offsets, data, n = unify(spec)
    mask = None
    if any(p.null_count for p in parts):
        mask = np.concatenate([p.is_null().to_numpy(zero_copy_only=False) for p in parts])
    rows = sum(len(p) for p in parts)
    idx = pa.Array.from_buffers(pa.int32(), rows, [None, _buffer(codes)])
    if mask is not None:
        idx = pa.array(idx.to_numpy(), mask=mask)
    strings = pa.Array.from_buffers(pa.string(), n, [None, _buffer(offsets), _buffer(data)])
    return pa.DictionaryArray.from_arrays(idx, strings)


def scan(
    buf: Any, start: int, stop: int, decode_ops: Any, closing: bool = False, exact: bool = False
) -> Scanned | None:
    """buf[start:stop] (a JSON array's elements; closing: they end at the array's `]`, before
    stop) scanned, or None if the C side refuses it. decode_ops(bytes of a JSON array) → event
    records, for the operators returned as spans. exact: times by the exact clock (clock.py)."""
    native = _kineto_scan.scan
    if CODES:
        got = native(buf, start, stop, _CATS, _SPEC, _CPU_OP, closing, THREADS, exact, _CODED)
    else:
        got = native(buf, start, stop, _CATS, _SPEC, _CPU_OP, closing, THREADS, exact)
    if isinstance(got[0], str):
        REFUSED[got[0]] += 1
        return None
    parts, close = got
    roles: dict[str, dict[str, list[pa.Array]]] = {}
    events = 0
    spans = []
    for n, per_role, part_spans in parts:
        events += n
        spans.append(part_spans)
        for code, cols in sorted(per_role.items()):
            role = ROLE_NAMES[code - 1]
            into = roles.setdefault(role, {c: [] for c in _COLUMNS[role]})
            if role == CODED_NAMES and len(cols) == len(_COLUMNS[role]) + 1:
                cols = cols[:4] + cols[5:]  # an older build's duration_ns
            for c, col in zip(_COLUMNS[role], cols, strict=True):
                a = _array(col)
                if role == CODED_NAMES and c == "name" and col[0] == "s":
                    a = a.dictionary_encode()  # an older build's plain names
                into[c].append(a)
    ops: list[Any] = []
    offs = memoryview(b"".join(spans)).cast("q")
    if len(offs):
        with memoryview(buf) as mv:
            pieces = [mv[offs[i] : offs[i + 1]] for i in range(0, len(offs), 2)]
            data = b"[" + b",".join(pieces) + b"]"
            del pieces
        try:
            ops = decode_ops(data)
        except (msgspec.MsgspecError, RecursionError, UnicodeDecodeError):
            REFUSED["operators msgspec does not decode"] += 1  # not seen; the piece decides
            return None
    return Scanned(events, roles, ops, close)


def join_calls(parts: list[pa.Array]) -> pa.Array:
    """A Python-call column's chunks as one array: integers without nulls by numpy (its big
    arrays get transparent huge pages: a fault per 2 MB, not per 4 KB), names unified in C."""
    if len(parts) == 1:
        return parts[0]
    if parts[0].type == pa.int64() and not any(p.null_count for p in parts):
        return pa.array(np.concatenate([p.to_numpy() for p in parts]))
    if isinstance(parts[0], pa.DictionaryArray) and (names := unify_names(parts)) is not None:
        return names
    return pa.concat_arrays(parts)
