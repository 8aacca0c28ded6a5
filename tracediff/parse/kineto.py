"""PyTorch profiler (Kineto) Chrome trace → run-file tables.

Stage: parse. Input: a Kineto trace, `.json` or `.json.gz`: the current schema (categories
`kernel`, `cuda_runtime`, ...), the 2021 one (`Kernel`, `Runtime`, `Operator`, ...), CUDA and
ROCm (hip*) traces. Output: a `Run` with the tables of `tracediff.schema`.

The only module that knows Kineto field names. The document is decoded by msgspec into small
typed records (only the fields used; `args` stays raw bytes until its category is known), then
each category becomes Arrow columns at once. The per-category `args` are decoded in one call per
category; no per-event dict is ever built. Measured in bench/kineto_ingest.py.

Time base: every `*_ns` column is Kineto's own clock in ns: `ts` (µs, three decimals) × 1000,
read exactly. Unix ns = `time_origin_utc_ns` + start_ns, where time_origin_utc_ns is the trace's
`baseTimeNanoseconds` (HTA's rule), 0 for traces whose `ts` already is Unix µs (2021 schema),
else null. ts is parsed as a double first; a double holds ns exactly below 2**43 µs (~100 days
of uptime, where Kineto's clock usually lives) because integer µs and the fraction are split
before scaling. Above that (Unix-µs traces with decimals, e.g. HTA's ns_resolution_trace) the
document is decoded again with exact decimals.
"""

from __future__ import annotations

import gzip
import re
import zlib
from decimal import Decimal
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracediff import schema
from tracediff.errors import InputError
from tracediff.parse import nccl
from tracediff.parse.nsys_sqlite import nesting_depth
from tracediff.runfile import Run

# Category → role. Current names, then the 2021 schema's capitalised ones.
_ROLES = {
    "kernel": "kernel", "Kernel": "kernel",
    "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
    "gpu_memset": "memset", "Memset": "memset",
    "cuda_runtime": "runtime", "Runtime": "runtime",
    "cuda_driver": "driver",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "cpu_op": "cpu_op", "Operator": "cpu_op",
}
_EXACT_LIMIT = float(1 << 43)  # µs; below it a double's ulp is < 1 ns


def _event_type(exact: bool) -> Any:
    num = Decimal | None if exact else float | int | None

    class Event(msgspec.Struct, gc=False):
        ph: str | None = None
        cat: Any = None
        name: Any = None
        pid: Any = None
        tid: Any = None
        ts: num = None  # type: ignore[valid-type]
        dur: num = None  # type: ignore[valid-type]
        args: msgspec.Raw = msgspec.Raw(b"{}")

    class Doc(msgspec.Struct):
        traceEvents: list[Event] | None = None  # noqa: N815 - Kineto's key
        deviceProperties: Any = None  # noqa: N815
        distributedInfo: Any = None  # noqa: N815
        baseTimeNanoseconds: Any = None  # noqa: N815
        displayTimeUnit: Any = None  # noqa: N815
        schemaVersion: Any = None  # noqa: N815
        cuda_driver_version: Any = None
        cuda_runtime_version: Any = None
        cupti_version: Any = None
        hip_runtime_version: Any = None
        hip_driver_version: Any = None
        roctracer_version: Any = None
        trace_id: Any = None

    return msgspec.json.Decoder(Doc)


def _field(name: str) -> Any:
    return msgspec.field(default=None, name=name)


class _GpuArgs(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = _field("registers per thread")
    nbytes: Any = _field("bytes")
    kind: Any = None
    coll: Any = _field("Collective name")
    in_nelems: Any = _field("In msg nelems")
    out_nelems: Any = _field("Out msg nelems")
    dtype: Any = None
    group_size: Any = _field("Group size")
    pg_name: Any = _field("Process Group Name")
    rank: Any = _field("Rank")


class _ApiArgs(msgspec.Struct, gc=False):
    correlation: Any = None


class _AnnArgs(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None


# ---------------------------------------------------------------- reading


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror or e}", "check the path and permissions") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(f"{path}: gzip data is truncated or corrupt ({e})",
                             "copy the trace again, or check it with `gzip -t`") from None
    return data


def _decode(path: Path, data: bytes, exact: bool) -> Any:
    try:
        doc = _event_type(exact).decode(data)
    except msgspec.ValidationError as e:
        where = str(e)
        if where.endswith("`$`") or "got `array`" in where and "traceEvents" not in where:
            raise InputError(f"{path}: JSON is not a Kineto trace (top level is not an object)",
                             "give a PyTorch profiler trace (torch.profiler export_chrome_trace)") from None
        raise InputError(f"{path}: unexpected value in Kineto trace: {e}",
                         "the trace may be from an unsupported profiler; please report it") from None
    except msgspec.DecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e})",
                         "the trace may be truncated or not UTF-8; export it again") from None
    if doc.traceEvents is None:
        raise InputError(f"{path}: JSON has no traceEvents: not a Kineto trace",
                         "give a PyTorch profiler trace (torch.profiler export_chrome_trace)")
    return doc


# ---------------------------------------------------------------- column helpers


def _columns(evs: list[Any], *names: str) -> list[list[Any]]:
    """Attribute columns of a list of records, transposed in C (no per-event Python code)."""
    if not evs:
        return [[] for _ in names]
    if len(names) == 1:
        return [list(map(attrgetter(names[0]), evs))]
    return [list(c) for c in zip(*map(attrgetter(*names), evs), strict=True)]


def _args(evs: list[Any], kind: type) -> list[Any]:
    """Decode the raw `args` of one category's events in a single msgspec call."""
    if not evs:
        return []
    blob = b"[" + b",".join([e.args for e in evs]) + b"]"
    try:
        return msgspec.json.decode(blob, type=list[kind])
    except msgspec.ValidationError:  # an arg of another shape: keep what does decode
        return [_one_args(e.args, kind) for e in evs]


def _one_args(raw: Any, kind: type) -> Any:
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError:
        return kind()


def _int(values: list[Any]) -> pa.Array:
    """int64 column; strings of digits are read as numbers ("25738", "stream 7" → 7)."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([_to_int(v) for v in values], pa.int64())


def _to_int(v: Any) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else None
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(?:stream\s*)?(-?\d+)\s*", v)
        if m:
            return int(m.group(1))
        if v.startswith("0x"):
            try:
                return int(v, 16)
            except ValueError:
                return None
    return None


class _Clock:
    """Turns Kineto µs values into exact int64 ns; flags values a double cannot hold exactly."""

    def __init__(self, exact: bool) -> None:
        self.exact = exact
        self.lossy = False

    def ns(self, values: list[Any]) -> pl.Series:
        if self.exact:
            arr = pa.array(values, pa.decimal128(38, 3))
            scaled = pc.multiply(arr, pa.scalar(Decimal(1000), pa.decimal128(4, 0)))
            return pl.Series(pc.cast(scaled, pa.int64()))
        s = pl.Series(values, dtype=pl.Float64, strict=False)
        whole = s.floor()
        if not self.lossy and s.len():
            frac = s.abs() >= _EXACT_LIMIT
            if (frac & (s != whole)).any():
                self.lossy = True
        return (whole.cast(pl.Int64) * 1000 + ((s - whole) * 1000).round().cast(pl.Int64)).rename("")


def _times(clock: _Clock, evs: list[Any]) -> pl.DataFrame:
    ts, dur = _columns(evs, "ts", "dur")
    start = clock.ns(ts)
    d = clock.ns(dur)
    return pl.DataFrame({"start_ns": start, "duration_ns": d}).with_columns(
        (pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns")
    )


def _xyz(values: list[Any], prefix: str) -> pl.DataFrame:
    out: dict[str, list[int | None]] = {f"{prefix}_{a}": [] for a in "xyz"}
    s = pl.Series([v if isinstance(v, list) else None for v in values], dtype=pl.List(pl.Int64),
                  strict=False)
    return pl.DataFrame({k: s.list.get(i, null_on_oob=True).cast(pl.Int32) for i, k in enumerate(out)})


_SHORT_DROP = re.compile(r"\(anonymous namespace\)|\{lambda[^}]*\}")


def short_name(name: str) -> str:
    """Base name of a demangled kernel: no return type, namespaces, template args or params."""
    s = _SHORT_DROP.sub("", name)
    depth, keep = 0, []
    for ch in s:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            keep.append(ch)
    base = "".join(keep).strip()
    base = base.split()[-1] if base.split() else name
    return base.rsplit("::", 1)[-1] or name


def _dict(values: pl.Series | list[Any]) -> pl.Series:
    return pl.Series(values, dtype=pl.String, strict=False).cast(pl.Categorical)
