"""Kineto's loosely typed values → typed Arrow columns: µs times → exact int64 ns, ids → int64.

Stage: parse (inside the Kineto reader). Input: Python values of one role's events, one chunk at
a time; output: polars Series / Arrow arrays.

Time base: every `*_ns` column is Kineto's own clock in ns: `ts` (µs, three decimals) × 1000,
exact. A double holds ts to the ns below 2**43 µs (~100 days of uptime, where Kineto's clock
lives) once integer µs and the fraction are scaled apart; when a trace has fractional ts above
that (Unix-µs clocks, e.g. HTA's ns_resolution_trace), it is decoded again with exact decimals
(`NeedExact`). Times no clock can hold (NaN, beyond int64 ns: a corrupt "ts": 1e300) refuse the
file. Chunks are converted as they are decoded, so the clock notes problems instead of raising
and `check()` raises the one the whole-trace conversion would have met first.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracediff.base.errors import InputError

EXACT_LIMIT = float(1 << 43)  # µs; below it a double's ulp is < 1 ns
TIME_LIMIT = 9.2e15  # µs: |ts| and dur must fit int64 ns


class NeedExact(Exception):
    """The trace's times need exact decimals (see the module docstring)."""


def to_int64(values: list[Any]) -> pa.Array:
    """int64 column. Numbers in strings are read too: tids "25738", streams "stream 7"."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    try:  # all strings (2021-schema tids): one vectorised extraction
        arr = pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return pa.array([_to_int(v) for v in values], pa.int64())
    if len(values) <= _FEW and all(v is None or _PLAIN.fullmatch(v) for v in values):
        # a few plain ASCII strings: Python's regex reads them as polars' does, without the
        # fixed cost of a polars call (~1 ms; a trace's distinct tids are often a handful)
        return pa.array([_to_int(v) for v in values], pa.int64())
    digits = pl.Series(arr).str.extract(r"^\s*(?:stream\s*)?(-?\d+)\s*$")
    return digits.cast(pl.Int64, strict=False).to_arrow()  # beyond int64: null


_FEW = 256
_PLAIN = re.compile(r"[\t\n\x0b\x0c\r\x20-\x7e]*")
"""ASCII where Python's and polars' regex engines agree (\\s differs on \\x1c-\\x1f, \\d beyond
ASCII)."""


def _to_int(v: Any) -> int | None:
    """An id as an int; None where there is none, or where it does not fit int64 (a corrupt
    value: null, not an error, as polars' cast of the all-strings case reads it)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, float):
        v = int(v) if v.is_integer() else None
    elif isinstance(v, str):
        m = re.fullmatch(r"\s*(?:stream\s*)?(-?\d+)\s*", v)
        v = int(m.group(1)) if m else None
    elif not isinstance(v, int):
        return None
    return v if v is not None and -(2**63) <= v < 2**63 else None


def _unusable(values: list[Any]) -> pl.Series:
    """True where a time is missing, NaN or beyond int64 ns."""
    try:
        f = pl.Series(values, dtype=pl.Float64, strict=False)
    except (TypeError, ValueError, pl.exceptions.PolarsError):  # exact decimals of any size
        f = pl.Series([None if v is None else float(v) for v in values], dtype=pl.Float64)
    return f.is_null() | f.is_nan() | (f.abs() >= TIME_LIMIT)


class Clock:
    """Turns Kineto µs values into exact int64 ns, one chunk of one role at a time."""

    def __init__(self, path: Path, exact: bool) -> None:
        self.path = path
        self.exact = exact
        self.missing_dur = 0
        self._refused: dict[tuple[str, str], Any] = {}  # (role, ts|dur) → first unusable value
        self._coarse: set[tuple[str, str]] = set()  # (role, ts|dur) with sub-ns fractions lost

    def merge(self, other: Clock) -> None:
        """Take in what `other` (the clock of the trace's next segment) noted."""
        self.missing_dur += other.missing_dur
        for k, v in other._refused.items():
            self._refused.setdefault(k, v)
        self._coarse |= other._coarse

    def ns(self, values: list[Any], what: str, role: str) -> pl.Series:
        if what == "dur":
            self.missing_dur += values.count(None)
        if self.exact:
            try:
                arr = pa.array(values, pa.decimal128(22, 3))
            except pa.ArrowInvalid:  # more than three decimals, or too large
                if _unusable(values).sum() > values.count(None):
                    return self._refuse(values, what, role)
                q = Decimal("0.001")
                arr = pa.array(
                    [None if v is None else v.quantize(q) for v in values], pa.decimal128(22, 3)
                )
            scaled = pc.multiply(arr, pa.scalar(Decimal(1000), pa.decimal128(4, 0)))
            return pl.Series(pc.cast(scaled, pa.int64()))
        s = pl.Series(values, dtype=pl.Float64, strict=False)
        if (s.is_nan() | (s.abs() >= TIME_LIMIT)).any():
            return self._refuse(values, what, role)
        whole = s.floor()
        if ((s.abs() >= EXACT_LIMIT) & (s != whole)).any():
            self._coarse.add((role, what))  # a double is coarser than 1 ns here
            return pl.Series([None] * len(values), dtype=pl.Int64)
        ns = whole.cast(pl.Int64) * 1000 + ((s - whole) * 1000).round().cast(pl.Int64)
        return ns.rename("")

    def doubles(self, values: list[Any], what: str, role: str) -> pa.Array:
        """One chunk's times as doubles (µs), noting an unusable one; `ns_of` converts them."""
        if what == "dur":
            self.missing_dur += values.count(None)
        try:
            a = pa.array(values, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            a = pl.Series(values, dtype=pl.Float64, strict=False).to_arrow()  # ints > 2**53
        x = (a.fill_null(0.0) if a.null_count else a).to_numpy()
        if not (np.abs(x) < TIME_LIMIT).all():  # NaN fails the comparison too
            self._refuse(values, what, role)
        return a

    def ns_of(self, s: pl.Series, what: str, role: str) -> pl.Series:
        """A role's `doubles`, all chunks at once, as exact ns (see the module docstring)."""
        if (role, what) in self._refused:
            return pl.Series([None] * len(s), dtype=pl.Int64)
        whole = s.floor()
        if ((s.abs() >= EXACT_LIMIT) & (s != whole)).any():
            self._coarse.add((role, what))  # a double is coarser than 1 ns here
            return pl.Series([None] * len(s), dtype=pl.Int64)
        return whole.cast(pl.Int64) * 1000 + ((s - whole) * 1000).round().cast(pl.Int64)

    def _refuse(self, values: list[Any], what: str, role: str) -> pl.Series:
        bad = _unusable(values)
        v = next(values[i] for i in bad.arg_true() if values[i] is not None)
        self._refused.setdefault((role, what), v)
        return pl.Series([None] * len(values), dtype=pl.Int64)

    def check(self, batches: list[list[str]], labels: dict[str, str]) -> None:
        """Raise what converting each batch (roles read as one table, in the order the tables
        are built) would have met first: an unusable time refuses the file; a time a double
        cannot hold to the ns raises NeedExact (decode again, exactly)."""
        for roles in batches:
            for what in ("ts", "dur"):
                for role in roles:
                    if (role, what) in self._refused:
                        v = self._refused[role, what]
                        raise InputError(
                            f"{self.path}: a {labels.get(role, role)} event has {what} {v} µs, "
                            f"beyond any clock (±{TIME_LIMIT:.1e} µs)",
                            "the trace is corrupt; export it again",
                        )
                if any((role, what) in self._coarse for role in roles):
                    raise NeedExact
