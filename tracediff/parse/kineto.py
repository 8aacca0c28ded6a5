"""PyTorch profiler (Kineto) Chrome trace → run-file tables.

Stage: parse. Input: a Kineto trace, `.json` or `.json.gz`: the current schema (categories
`kernel`, `cuda_runtime`, ...), the 2021 one (`Kernel`, `Runtime`, `Operator`, ...), CUDA and
ROCm (hip*) traces. Output: a `Run` with the tables of `tracediff.schema`.

The only module that knows Kineto field names. msgspec decodes the document into small typed
records holding only the fields used, `args` kept as raw JSON: on the 35 MB ResNet50 trace that
takes 0.05 s and 33 MB, where orjson's dicts take 0.23 s and 137 MB and polars' read_json with
a schema 1.1 s (measured on the development machine). Events are grouped by
category as one polars column; each group becomes Python columns plus its `args`, decoded in
one msgspec call; then the records and the raw JSON are dropped and the tables are built with
polars. The GC is paused meanwhile (nothing here makes cycles). bench/kineto_ingest.py measures.

Time base: every `*_ns` column is Kineto's own clock in ns: `ts` (µs, three decimals) × 1000,
exact. Unix ns = `time_origin_utc_ns` + start_ns, where time_origin_utc_ns is the trace's
`baseTimeNanoseconds` (HTA's rule), 0 when `ts` already is Unix µs (2021 schema), else null.
`displayTimeUnit` only sets the viewer's unit: ts stays µs. A double holds ts to the ns below
2**43 µs (~100 days of uptime, where Kineto's clock lives) once integer µs and the fraction are
scaled apart; when a trace has fractional ts above that (Unix-µs clocks, e.g. HTA's
ns_resolution_trace), it is decoded again with exact decimals.

Kineto's kernel "shared memory" is static + dynamic together; the schema keeps the two apart, so
both stay null rather than hold the sum.
"""

from __future__ import annotations

import gc
import os
import re
import zlib
from decimal import Decimal
from itertools import repeat
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Literal

import msgspec
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracediff import schema
from tracediff.errors import InputError
from tracediff.parse import nccl
from tracediff.parse.nsys_sqlite import nesting_depth
from tracediff.runfile import Run


def _inflater() -> Any:
    """ISA-L inflates gzip twice as fast as zlib (measured on the 35 MB ResNet50 trace)."""
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency; zlib keeps a bare install going
        return zlib


_inflate: Any = _inflater()

# Category → role. Current names, then the 2021 schema's capitalised ones.
_ROLES = {
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
}
_EXACT_LIMIT = float(1 << 43)  # µs; below it a double's ulp is < 1 ns


# Phases of the Chrome trace format, and the categories Kineto writes (libkineto ActivityType
# names, flow and meta categories, the 2021 names). Decoded as Literals they cost no string per
# event; a trace with another category or phase is decoded again with plain strings.
_Phase = Literal[
    "B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v",
    "R", "c", "(", ")",
]  # fmt: skip
_Category = Literal[
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_user_Annotation", "gpu_memcpy",
    "gpu_memset", "kernel", "external_correlation", "cuda_runtime", "cuda_driver",
    "cpu_instant_event", "python_function", "overhead", "mtia_runtime", "mtia_ccp_events",
    "mtia_insight", "mtia_counters", "cuda_sync", "cuda_event", "glow_runtime",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm",
    "privateuse1_runtime", "privateuse1_driver", "mlu_user_annotation", "ac2g", "fwdbwd",
    "Trace", "async", "Operator", "Kernel", "Runtime", "Memcpy", "Memset", "Python",
]  # fmt: skip


class _Event(msgspec.Struct, gc=False):
    """One trace event, times as JSON numbers (double or int)."""

    ph: str | None = None
    cat: str | None = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: float | int | None = None
    dur: float | int | None = None
    args: msgspec.Raw = msgspec.Raw(b"{}")


class _LeanEvent(_Event, gc=False):
    """Phase and category as Literals: no string object per event."""

    ph: _Phase | None = None
    cat: _Category | None = None


class _ExactEvent(_Event, gc=False):
    """Times as exact decimals (for clocks beyond a double's ns precision)."""

    ts: Decimal | None = None  # type: ignore[assignment]
    dur: Decimal | None = None  # type: ignore[assignment]


class _LeanExactEvent(_ExactEvent, gc=False):
    ph: _Phase | None = None
    cat: _Category | None = None


class _Doc(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # noqa: N815 - Kineto's keys
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


class _LeanDoc(_Doc):
    traceEvents: list[_LeanEvent] | None = None  # type: ignore[assignment]  # noqa: N815


class _ExactDoc(_Doc):
    traceEvents: list[_ExactEvent] | None = None  # type: ignore[assignment]  # noqa: N815


class _LeanExactDoc(_Doc):
    traceEvents: list[_LeanExactEvent] | None = None  # type: ignore[assignment]  # noqa: N815


# (exact, lean) → decoder
_DECODERS: dict[tuple[bool, bool], Any] = {
    (False, False): msgspec.json.Decoder(_Doc),
    (False, True): msgspec.json.Decoder(_LeanDoc),
    (True, False): msgspec.json.Decoder(_ExactDoc),
    (True, True): msgspec.json.Decoder(_LeanExactDoc),
}


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


_I64, _STR, _INTS = pl.Int64(), pl.String(), pl.List(pl.Int64())


def _column_type(field: str) -> pl.DataType:
    if field in ("grid", "block"):
        return _INTS
    return _STR if field in ("kind", "coll", "dtype", "pg_name") else _I64


# args fields read per category, as typed columns
_ARG_COLUMNS: dict[type, dict[str, pl.DataType]] = {
    kind: {f: _column_type(f) for f in kind.__struct_fields__}
    for kind in (_GpuArgs, _ApiArgs, _AnnArgs)
}


# ---------------------------------------------------------------- reading


PEAK_PER_JSON_BYTE = 3
"""Peak memory of a parse is up to ~3x the uncompressed JSON (bench/kineto_ingest.py)."""


def memory_budget() -> int:
    """Bytes of JSON this machine can parse: available memory / PEAK_PER_JSON_BYTE.

    $TRACEDIFF_MEMORY_BYTES overrides the available memory (containers whose limits
    /proc/meminfo does not show)."""
    env = os.environ.get("TRACEDIFF_MEMORY_BYTES")
    avail = int(env) if env and env.isdigit() else None
    if avail is None:
        try:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f)
            avail = int(info["MemAvailable"].split()[0]) * 1024
        except (OSError, KeyError, ValueError):
            avail = 1 << 62
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)  # an address-space limit caps it too
    if soft != resource.RLIM_INFINITY:
        avail = min(avail, soft)
    return avail // PEAK_PER_JSON_BYTE


def _size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _too_big(path: Path, size: int, budget: int) -> InputError:
    return InputError(
        f"{path}: the trace is {_size(size)} of JSON or more; parsing it needs about "
        f"{PEAK_PER_JSON_BYTE}x that and this machine has memory for {_size(budget)} of JSON",
        "profile fewer steps, or parse it on a machine with more memory",
    )


def _read(path: Path) -> bytes:
    budget = memory_budget()
    try:
        size = path.stat().st_size
        if size > budget:  # fail before reading, not after swapping
            raise _too_big(path, size, budget)
        data = path.read_bytes()
    except OSError as e:
        raise InputError(
            f"{path}: cannot read: {e.strerror or e}", "check the path and permissions"
        ) from None
    if data[:2] == b"\x1f\x8b":
        # ISIZE, the gzip trailer: the last member's size mod 2**32 -- a bomb under 4 GiB is
        # refused without inflating a byte; larger ones are stopped by the limit while inflating
        if len(data) >= 18 and int.from_bytes(data[-4:], "little") > budget:
            raise _too_big(path, int.from_bytes(data[-4:], "little"), budget)
        try:
            data = _gunzip(data, budget)
        except _Oversized:
            raise _too_big(path, budget + 1, budget) from None
        except (OSError, EOFError, zlib.error, _inflate.error) as e:
            raise InputError(
                f"{path}: gzip data is truncated or corrupt ({e})",
                "copy the trace again, or check it with `gzip -t`",
            ) from None
    return data


class _Oversized(Exception):
    pass


def _gunzip(data: bytes, limit: int) -> bytes:
    """gzip → bytes in one C call per member (gzip.decompress adds a second CRC pass), stopping
    as soon as the output would pass `limit` bytes (a gzip bomb fails at once, not at OOM)."""
    out = []
    total = 0
    while data:
        d = _inflate.decompressobj(wbits=31)
        chunk = d.decompress(data, max(limit - total, 0) + 1)
        total += len(chunk)
        if total > limit or d.unconsumed_tail:
            raise _Oversized()
        out.append(chunk)
        if not d.eof:
            raise EOFError("compressed stream ended before the end-of-stream marker")
        data = d.unused_data.lstrip(b"\x00")
    return out[0] if len(out) == 1 else b"".join(out)


def _decode(path: Path, data: bytes, exact: bool) -> Any:
    try:
        try:
            doc = _DECODERS[exact, True].decode(data)
        except msgspec.ValidationError as e:
            if not str(e).endswith(("].cat`", "].ph`")):
                raise
            doc = _DECODERS[exact, False].decode(data)  # a category or phase not listed
    except msgspec.ValidationError as e:
        if " - at `" not in str(e):  # msgspec names no path for the top level
            raise InputError(
                f"{path}: JSON is not a Kineto trace (top level is not an object)",
                "give a PyTorch profiler trace (torch.profiler export_chrome_trace)",
            ) from None
        raise InputError(
            f"{path}: unexpected value in Kineto trace: {e}",
            "the trace may be from an unsupported profiler; please report it",
        ) from None
    except RecursionError:
        raise InputError(
            f"{path}: JSON is nested too deeply to be a Kineto trace",
            "the file is corrupt or not a trace",
        ) from None
    except UnicodeDecodeError as e:
        raise InputError(
            f"{path}: not UTF-8 text (byte {e.start}: {e.reason})",
            "Kineto writes UTF-8 JSON; the file is corrupt or not a trace",
        ) from None
    except msgspec.DecodeError as e:
        raise InputError(
            f"{path}: not valid JSON ({e})",
            "the trace may be truncated or not UTF-8; export it again",
        ) from None
    if doc.traceEvents is None:
        raise InputError(
            f"{path}: JSON has no traceEvents: not a Kineto trace",
            "give a PyTorch profiler trace (torch.profiler export_chrome_trace)",
        )
    return doc


# ---------------------------------------------------------------- column helpers


def _columns(evs: list[Any], *names: str) -> list[list[Any]]:
    """Attribute columns of a list of records: one C-level pass per attribute."""
    return [list(map(attrgetter(n), evs)) for n in names]


def _args(evs: list[Any], kind: type) -> pl.DataFrame:
    """The raw `args` of one category's events as columns: msgspec decodes a chunk at a time
    (one call per chunk) and each chunk's records become columns and are dropped at once."""
    fields = _ARG_COLUMNS[kind]
    parts = [pl.DataFrame(schema=fields)]
    step = 1 << 14  # bounds the joined copy of the raw args and the records alive at once
    for i in range(0, len(evs), step):
        part = evs[i : i + step]
        blob = b"[" + b",".join([e.args for e in part]) + b"]"
        try:
            recs = msgspec.json.decode(blob, type=list[kind])  # type: ignore[valid-type]
        except msgspec.ValidationError:  # an arg of another shape: keep what does decode
            recs = [_one_args(e.args, kind) for e in part]
        cols = [_typed(list(map(attrgetter(f), recs)), t).alias(f) for f, t in fields.items()]
        parts.append(pl.DataFrame(cols))
    return pl.concat(parts)


def _typed(values: list[Any], dtype: pl.DataType) -> pl.Series:
    if dtype == _I64:
        return pl.Series(_int(values))
    if dtype == _INTS:
        try:
            return pl.Series(pa.array(values, pa.list_(pa.int64())))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            ok = [
                v if isinstance(v, list) and all(type(x) is int for x in v) else None
                for v in values
            ]
            return pl.Series(pa.array(ok, pa.list_(pa.int64())))
    return pl.Series(values, dtype=pl.String, strict=False)


def _one_args(raw: Any, kind: type) -> Any:
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError:
        return kind()


class _Batch:
    """One role's events as Python columns (event fields and decoded args), not records.

    Building batches right after grouping lets the event records and the raw JSON go before
    any table is built: what stays is only the values the tables need.
    """

    __slots__ = ("role", "name", "pid", "tid", "ts", "dur", "args")
    _COLUMNS = ("name", "pid", "tid", "ts", "dur", "args")

    def __init__(self, role: str, evs: list[Any], kind: type | None) -> None:
        self.role = role
        self.name, self.pid, self.tid, self.ts, self.dur = _columns(
            evs, "name", "pid", "tid", "ts", "dur"
        )
        self.args = _args(evs, kind) if kind is not None else pl.DataFrame()

    def __len__(self) -> int:
        return len(self.ts)

    def __add__(self, other: _Batch) -> _Batch:
        out = _Batch(self.role, [], None)
        for f in self._COLUMNS:
            a, b = getattr(self, f), getattr(other, f)
            setattr(out, f, pl.concat([a, b]) if isinstance(a, pl.DataFrame) else a + b)
        return out

    def drop_missing_ts(self) -> int:
        """Drop events without `ts` (nothing can place them); returns how many."""
        n = self.ts.count(None)
        if n:
            keep = [i for i, t in enumerate(self.ts) if t is not None]
            for f in self._COLUMNS:
                col = getattr(self, f)
                if isinstance(col, pl.DataFrame):
                    setattr(self, f, col[keep] if col.width else col)
                else:
                    setattr(self, f, [col[i] for i in keep])
        return n


def _int(values: list[Any]) -> pa.Array:
    """int64 column. Numbers in strings are read too: tids "25738", streams "stream 7"."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    try:  # all strings (2021-schema tids): one vectorised extraction
        strs = pl.Series(pa.array(values, pa.string()))
        return strs.str.extract(r"^\s*(?:stream\s*)?(-?\d+)\s*$").cast(pl.Int64).to_arrow()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
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
        return int(m.group(1)) if m else None
    return None


_TIME_LIMIT = 9.2e15  # µs: |ts| and dur must fit int64 ns


def _unusable(values: list[Any]) -> pl.Series:
    """True where a time is missing, NaN or beyond int64 ns."""
    try:
        f = pl.Series(values, dtype=pl.Float64, strict=False)
    except (TypeError, ValueError, pl.exceptions.PolarsError):  # exact decimals of any size
        f = pl.Series([None if v is None else float(v) for v in values], dtype=pl.Float64)
    return f.is_null() | f.is_nan() | (f.abs() >= _TIME_LIMIT)


class _Clock:
    """Turns Kineto µs values into exact int64 ns.

    Times no clock can hold (NaN, beyond int64 ns: a corrupt "ts": 1e300) refuse the file.
    """

    def __init__(self, path: Path, exact: bool) -> None:
        self.path = path
        self.exact = exact
        self.missing_dur = 0

    def _refuse(self, values: list[Any], what: str, role: str) -> InputError:
        bad = _unusable(values)
        v = next(values[i] for i in bad.arg_true() if values[i] is not None)
        return InputError(
            f"{self.path}: a {role} event has {what} {v} µs, beyond any clock "
            f"(±{_TIME_LIMIT:.1e} µs)",
            "the trace is corrupt; export it again",
        )

    def ns(self, values: list[Any], what: str, role: str) -> pl.Series:
        if what == "dur":
            self.missing_dur += values.count(None)
        if self.exact:
            try:
                arr = pa.array(values, pa.decimal128(22, 3))
            except pa.ArrowInvalid:  # more than three decimals, or too large
                if _unusable(values).sum() > values.count(None):
                    raise self._refuse(values, what, role) from None
                q = Decimal("0.001")
                arr = pa.array(
                    [None if v is None else v.quantize(q) for v in values], pa.decimal128(22, 3)
                )
            scaled = pc.multiply(arr, pa.scalar(Decimal(1000), pa.decimal128(4, 0)))
            return pl.Series(pc.cast(scaled, pa.int64()))
        s = pl.Series(values, dtype=pl.Float64, strict=False)
        if (s.is_nan() | (s.abs() >= _TIME_LIMIT)).any():
            raise self._refuse(values, what, role)
        whole = s.floor()
        if ((s.abs() >= _EXACT_LIMIT) & (s != whole)).any():
            raise _NeedExact  # a double is coarser than 1 ns here: decode again, exactly
        ns = whole.cast(pl.Int64) * 1000 + ((s - whole) * 1000).round().cast(pl.Int64)
        return ns.rename("")


def _times(clock: _Clock, b: _Batch) -> pl.DataFrame:
    start = clock.ns(b.ts, "ts", b.role)
    d = clock.ns(b.dur, "dur", b.role)
    return pl.DataFrame({"start_ns": start, "duration_ns": d}).with_columns(
        (pl.col("start_ns") + pl.col("duration_ns")).alias("end_ns")
    )


def _xyz(s: pl.Series, prefix: str) -> pl.DataFrame:
    """[x, y, z] lists → three int32 columns (null where absent)."""
    return pl.DataFrame(
        {
            f"{prefix}_{a}": s.list.get(i, null_on_oob=True).cast(pl.Int32)
            for i, a in enumerate("xyz")
        }
    )


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


# ---------------------------------------------------------------- tables


def _api(clock: _Clock, runtime: _Batch, driver: _Batch) -> pl.DataFrame:
    b = runtime + driver
    if not len(b):
        return pl.DataFrame()
    corr = b.args["correlation"]
    df = pl.DataFrame(
        {
            "process_id": _int(b.pid),
            "thread_id": _int(b.tid),
            "name": pl.Series(b.name, dtype=pl.String, strict=False).str.replace(r"_v\d+$", ""),
            "api_kind": ["runtime"] * len(runtime) + ["driver"] * len(driver),
            "correlation_id": corr,
        }
    )
    return pl.concat([df, _times(clock, b)], how="horizontal").sort("start_ns", maintain_order=True)


def _launch_join(ops: pl.DataFrame, api: pl.DataFrame, main_pid: int | None) -> pl.DataFrame:
    """Attach the launching API call by correlation (graph kernels: their cudaGraphLaunch)."""
    if api.height:
        keys = (
            api.filter(pl.col("correlation_id").is_not_null())
            .select(
                pl.col("correlation_id"),
                pl.col("process_id").alias("_launch_pid"),
                pl.col("thread_id").alias("launch_thread_id"),
                pl.col("name").alias("launch_api"),
                pl.col("start_ns").alias("launch_start_ns"),
                pl.col("end_ns").alias("launch_end_ns"),
            )
            .unique(subset=["correlation_id"], keep="first", maintain_order=True)
        )
        ops = ops.join(keys, on="correlation_id", how="left", maintain_order="left")
    else:
        ops = ops.with_columns(
            pl.lit(None, pl.Int64).alias("_launch_pid"),
            pl.lit(None, pl.Int64).alias("launch_thread_id"),
            pl.lit(None, pl.String).alias("launch_api"),
            pl.lit(None, pl.Int64).alias("launch_start_ns"),
            pl.lit(None, pl.Int64).alias("launch_end_ns"),
        )
    return ops.with_columns(
        pl.coalesce(pl.col("_launch_pid"), pl.lit(main_pid, pl.Int64)).alias("process_id")
    ).drop("_launch_pid")


def _or(s: pl.Series, fallback: list[Any]) -> pl.Series:
    """An int column from args, completed from an event field (device ← pid, stream ← tid)."""
    if s.null_count():
        s = s.fill_null(pl.Series(_int(fallback)))
    return s


def _gpu_base(clock: _Clock, b: _Batch) -> pl.DataFrame:
    dev, stream, corr = b.args["device"], b.args["stream"], b.args["correlation"]
    return pl.concat(
        [
            pl.DataFrame(
                {
                    "device_id": _or(dev, b.pid).cast(pl.Int32),
                    "stream_id": _or(stream, b.tid),
                    "correlation_id": corr,
                    "name": pl.Series(b.name, dtype=pl.String, strict=False),
                }
            ),
            _times(clock, b),
        ],
        how="horizontal",
    )


def _comm_columns(args: pl.DataFrame) -> pl.DataFrame:
    """Kineto's collective args (NCCL kernels, record_param_comms), underscored."""
    return args.select(
        pl.col("coll").alias("_coll"),
        pl.col("in_nelems").alias("_in_nelems"),
        pl.col("out_nelems").alias("_out_nelems"),
        pl.col("dtype").alias("_dtype"),
        pl.col("group_size").cast(pl.Int32).alias("_group_size"),
        pl.col("pg_name").alias("_comm_id"),
        pl.col("rank").cast(pl.Int32).alias("_rank"),
    )


def _kernels(clock: _Clock, b: _Batch, api: pl.DataFrame, main_pid: int | None) -> pl.DataFrame:
    """Kernels, with Kineto's collective args kept (underscored) for the collectives table."""
    if not len(b):
        return pl.DataFrame()
    a = b.args
    df = pl.concat(
        [
            _gpu_base(clock, b),
            _xyz(a["grid"], "grid"),
            _xyz(a["block"], "block"),
            a.select(pl.col("registers").cast(pl.Int32).alias("registers_per_thread")),
            _comm_columns(b.args),
        ],
        how="horizontal",
    ).sort("start_ns", maintain_order=True)
    return _launch_join(df, api, main_pid)


def _kernel_table(k: pl.DataFrame) -> pa.Table:
    if k.height == 0:
        return schema.empty("kernels")
    names = k["name"].unique().drop_nulls()
    short = pl.DataFrame({"name": names, "short_name": [short_name(n) for n in names]})
    k = k.join(short, on="name", how="left", maintain_order="left")
    cols = [c for c in schema.KERNELS.names if c in k.columns]
    return schema.conform("kernels", k.select(cols).to_arrow())


_COPY = r"^Memcpy\s+(?P<ck>\w+)(?:\s*\((?P<src>[^)]*?)\s*->\s*(?P<dst>[^)]*?)\))?"


def _memops(
    clock: _Clock, cp: _Batch, ms: _Batch, api: pl.DataFrame, main_pid: int | None
) -> pa.Table:
    parts = []
    for b, kind in ((cp, "memcpy"), (ms, "memset")):
        if not len(b):
            continue
        df = pl.concat(
            [
                _gpu_base(clock, b),
                b.args.select(pl.col("nbytes").alias("bytes"), pl.col("kind").alias("_kind_arg")),
            ],
            how="horizontal",
        )
        if kind == "memcpy":
            g = pl.col("name").str.extract_groups(_COPY)
            df = df.with_columns(
                pl.coalesce(g.struct.field("ck"), pl.col("_kind_arg")).alias("copy_kind"),
                g.struct.field("src").alias("src_kind"),
                g.struct.field("dst").alias("dst_kind"),
            )
        else:
            df = df.with_columns(
                pl.lit(None, pl.String).alias("copy_kind"),
                pl.lit(None, pl.String).alias("src_kind"),
                pl.col("name").str.extract(r"^Memset\s*\(([^)]*)\)").alias("dst_kind"),
            )
        parts.append(df.with_columns(pl.lit(kind).alias("kind")).drop("_kind_arg", "name"))
    if not parts:
        return schema.empty("memops")
    df = _launch_join(
        pl.concat(parts, how="vertical_relaxed").sort("start_ns", maintain_order=True),
        api,
        main_pid,
    )
    return schema.conform(
        "memops", df.select([c for c in schema.MEMOPS.names if c in df.columns]).to_arrow()
    )


def _ranges(clock: _Clock, cpu: _Batch, gpu: _Batch, main_pid: int | None) -> pa.Table:
    """user_annotation / ProfilerStep#N on CPU threads; gpu_user_annotation on device streams."""
    parts = []
    if len(cpu):
        parts.append(
            pl.concat(
                [
                    pl.DataFrame(
                        {
                            "process_id": _int(cpu.pid),
                            "thread_id": _int(cpu.tid),
                            "name": pl.Series(cpu.name, dtype=pl.String, strict=False),
                            "device_id": pl.Series([None] * len(cpu), dtype=pl.Int32),
                            "_lane": pl.Series([None] * len(cpu), dtype=pl.Int64),
                        }
                    ),
                    _times(clock, cpu),
                ],
                how="horizontal",
            )
        )
    if len(gpu):
        dev, stream = gpu.args["device"], gpu.args["stream"]
        parts.append(
            pl.concat(
                [
                    pl.DataFrame(
                        {
                            "process_id": pl.Series([main_pid] * len(gpu), dtype=pl.Int64),
                            "thread_id": pl.Series([None] * len(gpu), dtype=pl.Int64),
                            "name": pl.Series(gpu.name, dtype=pl.String, strict=False),
                            "device_id": _or(dev, gpu.pid).cast(pl.Int32),
                            "_lane": _or(stream, gpu.tid),
                        }
                    ),
                    _times(clock, gpu),
                ],
                how="horizontal",
            )
        )
    if not parts:
        return schema.empty("nvtx_ranges")
    r = pl.concat(parts, how="vertical_relaxed")
    r = r.with_columns(
        nesting_depth(
            r, "start_ns", "end_ns", ["process_id", "thread_id", "device_id", "_lane"]
        ).alias("depth"),
        pl.lit("annotation").alias("range_kind"),
    ).sort("start_ns", maintain_order=True)
    return schema.conform("nvtx_ranges", r.drop("_lane").to_arrow())


def _collectives(k: pl.DataFrame, host: pl.DataFrame, rank: int | None) -> pa.Table:
    """NCCL kernels (source "kernel") and c10d `record_param_comms` host records ("host")."""
    parts = []
    if k.height:
        k = k.filter(nccl.is_comm(pl.col("name")) | pl.col("_coll").is_not_null())
    if k.height:
        dec = nccl.decode(k["name"])
        k = pl.concat([k, dec.rename({c: f"_dec_{c}" for c in dec.columns})], how="horizontal")
        parts.append(
            k.select(
                pl.lit("kernel").alias("source"),
                "device_id",
                "process_id",
                "stream_id",
                pl.col("launch_thread_id").alias("thread_id"),
                "start_ns",
                "end_ns",
                "duration_ns",
                "name",
                pl.coalesce(nccl.kineto_op(pl.col("_coll")), pl.col("_dec_op")).alias("op"),
                pl.col("_dec_reduce_op").alias("reduce_op"),
                pl.coalesce(pl.col("_dec_dtype"), pl.col("_dtype")).alias("dtype"),
                pl.col("_dec_algorithm").alias("algorithm"),
                pl.col("_dec_protocol").alias("protocol"),
                "_coll",
                "_in_nelems",
                "_out_nelems",
                "_dtype",
                "correlation_id",
                "_rank",
                "_group_size",
                "_comm_id",
            )
        )
    if host.height:
        parts.append(
            host.select(
                pl.lit("host").alias("source"),
                "process_id",
                "thread_id",
                "start_ns",
                "end_ns",
                "duration_ns",
                pl.col("_coll").alias("name"),
                nccl.kineto_op(pl.col("_coll")).alias("op"),
                pl.col("_dtype").alias("dtype"),
                "_coll",
                "_in_nelems",
                "_out_nelems",
                "_dtype",
                "_rank",
                "_group_size",
                "_comm_id",
            )
        )
    if not parts:
        return schema.empty("collectives")
    df = pl.concat(parts, how="diagonal_relaxed")
    size = nccl.dtype_bytes(pl.coalesce(pl.col("_dtype"), pl.col("dtype")))
    nelems = (
        pl.when(pl.col("op") == "AllGather")
        .then(pl.col("_out_nelems"))
        .otherwise(pl.col("_in_nelems"))
    )
    df = df.with_columns(
        (nelems * size).alias("bytes"),
        pl.coalesce(pl.col("_rank"), pl.lit(rank, pl.Int32)).alias("rank"),
        pl.col("_group_size").alias("group_size"),
        pl.col("_comm_id").alias("comm_id"),
    ).sort("start_ns", maintain_order=True)
    return schema.conform(
        "collectives",
        df.select([c for c in schema.COLLECTIVES.names if c in df.columns]).to_arrow(),
    )


def _host_comms(clock: _Clock, b: _Batch) -> pl.DataFrame:
    if not len(b):
        return pl.DataFrame()
    ids = pl.DataFrame({"process_id": _int(b.pid), "thread_id": _int(b.tid)})
    return pl.concat([ids, _comm_columns(b.args), _times(clock, b)], how="horizontal")


def _devices(props: Any, main_pid: int | None) -> pa.Table:
    rows = [p for p in props or [] if isinstance(p, dict)]
    if not rows:
        return schema.empty("devices")

    def cc(p: dict[str, Any]) -> str | None:
        ma, mi = p.get("computeMajor"), p.get("computeMinor")
        return f"{ma}.{mi}" if ma is not None and mi is not None else None

    df = pl.DataFrame(
        {
            "device_id": pl.Series(_int([p.get("id") for p in rows])).cast(pl.Int32),
            "process_id": pl.Series([main_pid] * len(rows), dtype=pl.Int64),
            "name": pl.Series([p.get("name") or None for p in rows], dtype=pl.String, strict=False),
            "sm_count": pl.Series(_int([p.get("numSms") for p in rows])).cast(pl.Int32),
            "memory_bytes": _int([p.get("totalGlobalMem") for p in rows]),
            "compute_capability": pl.Series([cc(p) for p in rows], dtype=pl.String),
        }
    )
    return schema.conform("devices", df.to_arrow())


def _metadata(path: Path, doc: Any, first_ts_ns: int | None) -> dict[str, Any]:
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    base = doc.baseTimeNanoseconds if isinstance(doc.baseTimeNanoseconds, int) else None
    if base is None and first_ts_ns is not None and first_ts_ns > 10**18:
        base = 0  # 2021-schema traces: ts is already Unix µs (after 2001-09)
    return {
        "source": str(path),
        "source_format": "kineto",
        "kineto_schema_version": doc.schemaVersion,
        "platform": "rocm"
        if doc.roctracer_version is not None or doc.hip_runtime_version is not None
        else "cuda",
        "rank": dist.get("rank"),
        "world_size": dist.get("world_size"),
        "distributed_backend": dist.get("backend"),
        "cuda_driver_version": doc.cuda_driver_version,
        "cuda_runtime_version": doc.cuda_runtime_version,
        "cupti_version": doc.cupti_version,
        "hip_runtime_version": doc.hip_runtime_version,
        "hip_driver_version": doc.hip_driver_version,
        "nccl_version": dist.get("nccl_version"),
        "trace_id": doc.trace_id,
        "time_origin_utc_ns": base,
        "time_base": "kineto clock: ts (µs) × 1000, exact; Unix ns = time_origin_utc_ns + *_ns "
        "(time_origin_utc_ns = baseTimeNanoseconds; 0 when ts is Unix µs; null if unknown)",
    }


# ---------------------------------------------------------------- entry point


_ROLE_NAMES = sorted(set(_ROLES.values()))
_ROLE_CODE = {cat: _ROLE_NAMES.index(role) + 1 for cat, role in _ROLES.items()}  # 0: not read


def _group(events: list[Any]) -> dict[str, list[Any]]:
    """Complete ('X') events by role. Categories become a one-byte polars column; each role's
    records are then picked by index in C, so no per-event Python code runs."""
    codes = pl.Series(
        list(map(_ROLE_CODE.get, map(attrgetter("cat"), events), repeat(0))), dtype=pl.UInt8
    )
    buckets: dict[str, list[Any]] = {r: [] for r in _ROLE_NAMES}
    for code in codes.unique().to_list():
        if code:
            evs = _take(events, (codes == code).arg_true().to_list())
            if list(map(attrgetter("ph"), evs)).count("X") != len(evs):
                evs = [e for e in evs if e.ph == "X"]
            buckets[_ROLE_NAMES[code - 1]] = evs
    return buckets


def _take(items: list[Any], idx: Any) -> list[Any]:
    idx = list(idx)
    return list(itemgetter(*idx)(items)) if len(idx) > 1 else [items[i] for i in idx]


class _NeedExact(Exception):
    """The trace's times need exact decimals (see the module docstring)."""


def read_kineto(path: Path) -> Run:
    """Read a Kineto Chrome trace (.json / .json.gz) into a Run.

    Raises InputError (one line naming the file) for anything that is not a readable trace;
    recoverable oddities (no GPU events, events without dur or ts) become `Run.warnings`.
    """
    path = Path(path)
    # Millions of short-lived tuples and lists would trigger full GC passes over every decoded
    # record (none of which form cycles); pause the collector while building.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _build(path, [_read(path)], exact=False)
        except _NeedExact:
            pass  # leave the except block first, so the first attempt's frames are freed
        return _build(path, [_read(path)], exact=True)
    finally:
        if was_enabled:
            gc.enable()


def _build(path: Path, holder: list[bytes], exact: bool) -> Run:
    data = holder.pop()  # the only reference: freed once the batches are built
    doc = _decode(path, data, exact)
    events = doc.traceEvents
    doc.traceEvents = None
    n_events = len(events)
    buckets = _group(events)
    del events
    cpu_ops = buckets.pop("cpu_op")
    names = pl.Series(_columns(cpu_ops, "name")[0], dtype=pl.String, strict=False)
    steps = _take(cpu_ops, names.str.starts_with("ProfilerStep#").arg_true())
    comms = _take(cpu_ops, (names == "record_param_comms").arg_true())
    kinds = {
        "kernel": _GpuArgs,
        "memcpy": _GpuArgs,
        "memset": _GpuArgs,
        "runtime": _ApiArgs,
        "driver": _ApiArgs,
        "gpu_annotation": _AnnArgs,
        "annotation": None,
    }
    del cpu_ops, names
    # one role at a time, each role's records freed as soon as its columns exist
    batch = {role: _Batch(role, buckets.pop(role), kind) for role, kind in kinds.items()}
    # 2021 traces record ProfilerStep#N as an operator; newer ones as a user_annotation only
    seen = set(batch["annotation"].name)
    batch["annotation"] += _Batch("annotation", [e for e in steps if e.name not in seen], None)
    batch["comms"] = _Batch("record_param_comms", comms, _GpuArgs)
    del buckets, steps, comms, seen, data

    warnings: list[str] = []
    no_ts = sum(b.drop_missing_ts() for b in batch.values())
    if no_ts:
        warnings.append(f"{path}: {no_ts} events have no ts and were skipped")
    if not (len(batch["kernel"]) or len(batch["memcpy"]) or len(batch["memset"])):
        warnings.append(
            f"{path}: no GPU kernels, copies or memsets in the trace "
            "(profile with ProfilerActivity.CUDA to record them)"
        )
    clock = _Clock(path, exact)
    api = _api(clock, batch["runtime"], batch["driver"])
    main_pid = _main_pid(api, batch["comms"] if len(batch["comms"]) else batch["annotation"])
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
    kern = _kernels(clock, batch["kernel"], api, main_pid)
    tables = {
        "kernels": _kernel_table(kern),
        "memops": _memops(clock, batch["memcpy"], batch["memset"], api, main_pid),
        "nvtx_ranges": _ranges(clock, batch["annotation"], batch["gpu_annotation"], main_pid),
        "collectives": _collectives(kern, _host_comms(clock, batch["comms"]), rank),
        "api_calls": schema.conform("api_calls", api.to_arrow())
        if api.height
        else schema.empty("api_calls"),
        "devices": _devices(doc.deviceProperties, main_pid),
    }
    if clock.missing_dur:
        warnings.append(
            f"{path}: {clock.missing_dur} events have no dur: their end_ns and duration_ns are null"
        )
    starts = [
        pc.min(t.column("start_ns")).as_py()
        for t in tables.values()
        if "start_ns" in t.column_names and t.num_rows
    ]
    meta = _metadata(path, doc, min(starts) if starts else None)
    meta["event_count"] = n_events
    return Run(tables=tables, metadata=meta, warnings=warnings)


def _main_pid(api: pl.DataFrame, cpu: _Batch) -> int | None:
    """The profiled process: the one that made the most CUDA/HIP API calls."""
    if api.height:
        mode = api["process_id"].drop_nulls().mode()
        if mode.len():
            return int(mode.sort()[0])
    pids = pl.Series(_int(cpu.pid)).drop_nulls()
    return int(pids.mode().sort()[0]) if pids.len() else None
