"""The precision every printed number has, so that the same inputs print the same bytes on any CPU.

Stage: output. The engine computes in float64, and a sum's last bits depend on the order its terms
were added in, which depends on the machine (SIMD width, thread count, the library's kernels): the
same pair gave `-0.38689026749999994` on one CPU and `-0.38689026750000005` on another. Every
report therefore prints a number *settled* first: rounded to `DIGITS` significant digits, then to
`DECIMALS` decimals (1e-9 ms = 1 fs, far below a GPU clock's 1 ns), with -0.0 as 0.0. A float
that differs from another only by summation noise (a few units in its 16th-17th digit) settles to
the same value, so JSON, CSV, the table, markdown and the TUI print the same text everywhere.
Values that are pure noise (the attribution's residual, ~1e-15 ms) settle to 0.

Only what is printed is settled: the engine's decisions (significance, p-values, what-if) are made
on the full values, and Parquet exports keep every bit (they are data, not a report).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

import numpy as np
import polars as pl

from tracediff.engine.result import Comparison

DIGITS = 12
"""Significant digits of every printed float."""
DECIMALS = 9
"""At most this many decimals (the numbers are ms, shares and percentages: 1e-9 is below any
clock's resolution)."""

T = TypeVar("T")


def settle(x: float) -> float:
    """`x` at the printed precision: DIGITS significant digits, DECIMALS decimals, no -0.0.
    NaN and ±inf pass through (the JSON writer turns them into null)."""
    if not math.isfinite(x):
        return x
    # CPython's decimal conversion is correctly rounded, so this is the same on every machine.
    return round(float(f"{x:.{DIGITS}g}"), DECIMALS) + 0.0


def settle_frame(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with every float column settled (report tables: hundreds to thousands of rows)."""
    cols = [c for c, t in df.schema.items() if t in (pl.Float64, pl.Float32)]
    if not cols or df.height == 0:
        return df
    return df.with_columns(
        pl.Series(c, [None if v is None else settle(v) for v in df[c].to_list()], df.schema[c])
        for c in cols
    )


def settled(obj: T) -> T:
    """`obj` with every float inside settled: floats and numpy floats, frames' float columns, and
    the values of dicts, lists, tuples and dataclasses, recursively. Other values are returned
    as they are (a dataclass field that is not data, such as a callable, is kept)."""
    return _settled(obj)  # type: ignore[no-any-return]


def _settled(obj: Any) -> Any:
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, float | np.floating):
        return settle(float(obj))
    if isinstance(obj, pl.DataFrame):
        return settle_frame(obj)
    if isinstance(obj, np.ndarray):
        return _settled(obj.tolist()) if obj.dtype.kind == "f" else obj
    if isinstance(obj, dict):
        return {k: _settled(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        items = [_settled(v) for v in obj]
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {
            f.name: _settled(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.init and _holds_numbers(getattr(obj, f.name))
        }
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def _holds_numbers(v: Any) -> bool:
    return isinstance(v, float | np.floating | np.ndarray | pl.DataFrame | dict | list | tuple) or (
        dataclasses.is_dataclass(v) and not isinstance(v, type)
    )


PRINTED = (
    "base", "head", "delta_ms_per_cycle", "delta_ci95", "delta_pct", "noise_floor_ms",
    "residual_ms_per_cycle", "p_value", "env_diffs", "attribution", "across_gpus", "host",
    "collectives", "totals", "sources", "clocks",
)  # fmt: skip
"""The Comparison fields the reports print from."""


def settled_comparison(c: Comparison) -> Comparison:
    """What the reports print of `c` (PRINTED), settled: its summaries, scalars and report
    tables. The per-cycle and per-op frames (cycles, events, the replay's inputs) are left as
    they are: the reports derive from them through settled values or not at all, and they can
    be large."""
    return dataclasses.replace(c, **{name: settled(getattr(c, name)) for name in PRINTED})
