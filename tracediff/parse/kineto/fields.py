"""The Kineto field vocabulary: which categories are read, as which role, which `args` keys each
role reads, and each column's type.

Stage: parse (inside the Kineto reader). The one place that spells Kineto category names and
`args` keys. Both ways a piece of traceEvents is read take them from here: the Python path
(roles.py, msgspec records → columns) and the native scanner (scan.py hands `_kineto_scan.c` the
categories with their role codes, each role's args keys with their column kinds, and reads the
columns back in `schema(role)` order; the C side spells no Kineto name of its own). So a field
added here is read by both, with the same name, type and values.

A role's frame has `name`, `pid`, `tid`, `start_ns`, `duration_ns`, `end_ns` (BASE_COLUMNS) and
then the `ARG_FIELDS` of that role, typed by `dtype`.
"""

from __future__ import annotations

import polars as pl

from tracediff.base import settings

CATEGORY_ROLE: dict[str, str] = {
    # current names, then the 2021 schema's capitalised ones
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "driver",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "python_function": "python",  # with_stack=True: one per Python call (stacks.py)
}
"""Event category (`cat`) → role. Events of any other category are not read."""

ROLE_NAMES: tuple[str, ...] = tuple(sorted(set(CATEGORY_ROLE.values())))
"""The roles a category maps to, in code order: role ROLE_NAMES[i] has code i + 1."""

ROLE_CODE: dict[str, int] = {
    cat: ROLE_NAMES.index(role) + 1
    for cat, role in CATEGORY_ROLE.items()
    if role != "python" or settings.kineto_stacks()
}
"""Category → one-byte role code (0, absent here: not read); the C scanner's role numbering.
$TRACEDIFF_KINETO_STACKS=0 leaves `python_function` out (its frame then stays empty)."""

_COMM = ("coll", "in_nelems", "out_nelems", "dtype", "group_size", "pg_name", "rank")
_COPY = ("device", "stream", "correlation", "nbytes", "kind")

ARG_FIELDS: dict[str, tuple[str, ...]] = {
    "kernel": ("device", "stream", "correlation", "grid", "block", "registers", *_COMM),
    "memcpy": _COPY,
    "memset": _COPY,
    "runtime": ("correlation",),
    "driver": ("correlation",),
    "gpu_annotation": ("device", "stream"),
    "annotation": (),
    "step": (),
    "comms": _COMM,
    "python": (),  # callers from time nesting: `Python parent id` skips levels (stacks.py)
}
"""The args fields (column names) each role reads. "step" (ProfilerStep#N operators) and "comms"
(c10d's record_param_comms operators) are read from cpu_op events, not from a category."""

ARG_KEYS: dict[str, str] = {
    "device": "device",
    "stream": "stream",
    "correlation": "correlation",
    "grid": "grid",
    "block": "block",
    "registers": "registers per thread",
    "nbytes": "bytes",
    "kind": "kind",
    "coll": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "dtype": "dtype",
    "group_size": "Group size",
    "pg_name": "Process Group Name",
    "rank": "Rank",
}
"""Column name → the `args` key it is read from."""

INT_LIST = pl.List(pl.Int64())
"""The type of `grid` and `block` (three integers each)."""

BASE_COLUMNS: dict[str, pl.DataType] = {
    "name": pl.String(),
    **{c: pl.Int64() for c in ("pid", "tid", "start_ns", "duration_ns", "end_ns")},
}
"""The columns every role's frame starts with, in order."""


CODED_NAMES = "python"
"""The role whose `name` column is dictionary-encoded (a Categorical in its frame): one name per
Python call, millions of them, a few thousand distinct. The native scanner writes codes and each
distinct name once (`_kineto_scan.c` 'd' columns); the msgspec path encodes its strings. Its
columns have no `duration_ns`: stack resolution reads only the end (8 bytes a call less, for
millions of calls; a missing `dur` still leaves the end null and is counted)."""


def dtype(field: str) -> pl.DataType:
    """The column type of an args field: a list of integers, a string, or an integer."""
    if field in ("grid", "block"):
        return INT_LIST
    return pl.String() if field in ("kind", "coll", "dtype", "pg_name") else pl.Int64()


def schema(role: str) -> dict[str, pl.DataType]:
    """A role's frame columns, in order: BASE_COLUMNS, then its ARG_FIELDS."""
    base = BASE_COLUMNS
    if role == CODED_NAMES:
        base = {c: t for c, t in BASE_COLUMNS.items() if c != "duration_ns"}
        base["name"] = pl.Categorical()
    return {**base, **{f: dtype(f) for f in ARG_FIELDS[role]}}
