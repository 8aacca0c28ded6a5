"""Every Arrow schema of a run file and of a comparison's diff tables, defined once.

Stage: the contract between readers (parse/*), the run file (runfile.py) and analysis (engine/*);
the diff tables (DIFF_TABLES, below) between the engine and its consumers (export, report).
Units are in the column names (`_ns`, `_bytes`); unknown is null, never -1. Names of kernels,
APIs and ranges are dictionary-encoded strings (they repeat millions of times).

Identity of a thread or process is the OS pid/tid. nsys packs them into globalTid; Kineto gives
them as pid/tid. `device_id` is the GPU index the profiler reports (nsys deviceId, Kineto device).
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from tracediff.base.errors import InputError
from tracediff.runs import arrowcols

FORMAT_VERSION = 2
"""Version of the run-file layout and these schemas. Bump on any incompatible change.
2: the `frames` and `stacks` tables and `stack_id` on kernels and memops (issue 19); a format-1
file reads them as empty / null (ADDED_IN_2)."""

_name = pa.dictionary(pa.int32(), pa.string())

# Where and when a GPU operation ran, the first columns of kernels and memops alike (the
# engine's OP_COLUMNS, engine/result.py, read them with the launch's).
_SPAN: list[tuple[str, pa.DataType]] = [
    ("device_id", pa.int32()),
    ("process_id", pa.int64()),
    ("stream_id", pa.int64()),
    ("start_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("duration_ns", pa.int64()),
]

# A GPU operation's launch, the same columns for kernels and memops: the API call that launched it,
# which each reader joins on the correlation id once for both tables (parse/nsys/tables.py,
# parse/kineto/tables.py).
_LAUNCH: list[tuple[str, pa.DataType]] = [
    ("correlation_id", pa.int64()),
    ("graph_node_id", pa.int64()),  # CUDA-graph node; null when launched eagerly
    ("launch_thread_id", pa.int64()),  # OS tid of the thread whose API call launched it
    ("launch_api", _name),  # e.g. cudaLaunchKernel, cudaGraphLaunch (no _vNNNN suffix)
    ("launch_start_ns", pa.int64()),
    ("launch_end_ns", pa.int64()),
    ("stack_id", pa.int64()),  # the launching call's Python stack (`stacks`); null: unknown
]

KERNELS = pa.schema(
    _SPAN
    + [
        ("name", _name),  # demangled
        ("short_name", _name),  # base name, without template arguments or parameters
        ("grid_x", pa.int32()),
        ("grid_y", pa.int32()),
        ("grid_z", pa.int32()),
        ("block_x", pa.int32()),
        ("block_y", pa.int32()),
        ("block_z", pa.int32()),
        ("registers_per_thread", pa.int32()),
        ("static_shared_memory_bytes", pa.int32()),
        ("dynamic_shared_memory_bytes", pa.int32()),
    ]
    + _LAUNCH
)

MEMOPS = pa.schema(
    _SPAN
    + [
        ("kind", _name),  # "memcpy" | "memset"
        ("copy_kind", _name),  # HtoD, DtoH, DtoD, HtoH, PtoP; null for memset
        ("bytes", pa.int64()),
        ("src_kind", _name),  # Device, Pageable, Pinned, Managed...
        ("dst_kind", _name),
    ]
    + _LAUNCH
)

API_CALLS = pa.schema(
    [
        ("process_id", pa.int64()),
        ("thread_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("name", _name),  # without the _vNNNN suffix
        ("api_kind", _name),  # "runtime" | "driver"
        ("correlation_id", pa.int64()),
        ("return_value", pa.int64()),
    ]
)

NVTX_RANGES = pa.schema(
    [
        ("process_id", pa.int64()),
        ("thread_id", pa.int64()),
        ("end_thread_id", pa.int64()),  # start/end ranges may end on another thread
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),  # null: never closed in the capture
        ("duration_ns", pa.int64()),
        ("domain", _name),  # null for the default domain
        ("name", _name),
        ("depth", pa.int32()),  # nesting depth among ranges of the same thread, 0 = outermost
        ("range_kind", _name),  # "push_pop" | "start_end" | "mark" | "annotation"
        ("category", pa.int64()),
        ("payload_int", pa.int64()),
        ("payload_double", pa.float64()),
        ("device_id", pa.int32()),  # set for GPU-side annotations (Kineto gpu_user_annotation)
    ]
)

COLLECTIVES = pa.schema(
    [
        ("source", _name),  # "kernel" (the NCCL kernel on the GPU) | "nvtx" (host NCCL range)
        ("device_id", pa.int32()),
        ("process_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("thread_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("duration_ns", pa.int64()),
        ("name", _name),  # kernel name, or NVTX range text (ncclAllReduce)
        ("op", _name),  # AllReduce, AllGather, ReduceScatter, SendRecv, Broadcast, ...
        ("reduce_op", _name),  # Sum, Prod, Max, ... as named in the kernel name
        ("dtype", _name),  # as named: bf16, f32, float, half...
        ("algorithm", _name),  # RING, TREE... as named; NCCL >= 2.19 names the entry point only
        ("protocol", _name),  # LL, LL128, SIMPLE as named
        ("bytes", pa.int64()),  # message bytes where the report has them
        ("correlation_id", pa.int64()),
        ("rank", pa.int32()),
        ("group_size", pa.int32()),
        ("comm_id", pa.string()),
    ]
)

DEVICES = pa.schema(
    [
        ("device_id", pa.int32()),
        ("process_id", pa.int64()),  # Kineto: the process (rank) that saw it; nsys: null
        ("name", pa.string()),
        ("sm_count", pa.int32()),
        ("memory_bytes", pa.int64()),
        ("bus_location", pa.string()),
        ("uuid", pa.string()),
        ("compute_capability", pa.string()),
        ("clock_hz", pa.int64()),
    ]
)

SYNCS = pa.schema(
    [
        # CUDA synchronization records: event sync / stream wait / stream sync / context sync.
        ("device_id", pa.int32()),
        ("process_id", pa.int64()),
        ("stream_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("sync_kind", _name),  # "event" | "stream_wait" | "stream" | "context"
        ("event_id", pa.int64()),
        ("correlation_id", pa.int64()),
    ]
)

CUDA_EVENTS = pa.schema(
    [
        # CUDA event records (cudaEventRecord: the event completes when the recording stream's
        # work enqueued before it is done) and stream waits (cudaStreamWaitEvent: work enqueued
        # on the waiting stream afterwards starts only after the event completed). One row per
        # record or wait; the API call is joined on (process, correlation id). A run file from an
        # older tracediff has no such table: it reads as empty.
        ("action", _name),  # "record" | "wait"
        ("device_id", pa.int32()),
        ("process_id", pa.int64()),
        ("stream_id", pa.int64()),  # the recording stream (record) or the waiting stream (wait)
        ("event_id", pa.int64()),  # the CUDA event; one event is re-recorded many times
        ("event_sync_id", pa.int64()),  # links a wait to its record directly (newer nsys); null
        ("correlation_id", pa.int64()),  # of the API call
        ("api", _name),  # cudaEventRecord, cudaStreamWaitEvent, ... (no _vNNNN suffix)
        ("thread_id", pa.int64()),  # OS tid of the calling thread
        ("api_start_ns", pa.int64()),
        ("api_end_ns", pa.int64()),
        ("completed_ns", pa.int64()),  # record: when the event completed on the GPU, if traced
    ]
)

FRAMES = pa.schema(
    [
        # One row per distinct source location of the launch stacks (Kineto `python_function`
        # names `file(line): function`). frame_id is a 64-bit hash of the frame's text, so the
        # same frame has the same id in every run. file is as the profiler wrote it (relative to
        # the working directory, or to sys.path for installed packages: `torch/nn/...`); null,
        # with line, for frames without a file (`<built-in method ...>`, `nn.Module: Linear_0`).
        # nsys function-trace frames: file from the module (`pkg/mod.py`), line null.
        ("frame_id", pa.int64()),
        ("file", _name),
        ("line", pa.int32()),  # the function's first line (Kineto), not the calling line
        ("function", _name),
    ]
)

STACKS = pa.schema(
    [
        # One launch stack per distinct call path that launched GPU work, as rows: its frames
        # from the launching (innermost) one at depth 0 to the outermost. stack_id: a 64-bit hash
        # chained over the frames (the same call path has the same id in every run of a commit);
        # kernels' and memops' stack_id point here. Runs without stacks: no rows.
        ("stack_id", pa.int64()),
        ("depth", pa.int32()),
        ("frame_id", pa.int64()),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "kernels": KERNELS,
    "memops": MEMOPS,
    "api_calls": API_CALLS,
    "nvtx_ranges": NVTX_RANGES,
    "collectives": COLLECTIVES,
    "devices": DEVICES,
    "syncs": SYNCS,
    "cuda_events": CUDA_EVENTS,
    "frames": FRAMES,
    "stacks": STACKS,
}

ADDED_IN_2: dict[str, tuple[str, ...]] = {"kernels": ("stack_id",), "memops": ("stack_id",)}
"""Columns format 2 added to format-1 tables (read from a format-1 file as nulls: `upgrade`);
format-1 files also lack the `frames` and `stacks` tables (read as empty)."""


# --- diff tables ---------------------------------------------------------------------------------
# The frames of a comparison (engine/result.py's `Comparison`: its docstrings say what each column
# means), with the types `compare --export` writes them as (export/parquet.py; the tables of
# docs/parquet-schema.md are generated from these). The engine's polars frames hold the same
# columns; there strings may be large or dictionary-encoded, and a table with no rows may come
# with no columns (tests/unit/engine/test_diff_schemas.py checks both sides against these).

_str, _i32, _i64, _f64, _bool = pa.string(), pa.int32(), pa.int64(), pa.float64(), pa.bool_()


def _floats(*names: str) -> list[tuple[str, pa.DataType]]:
    return [(n, _f64) for n in names]


# a contributor's estimate (engine.stats.ESTIMATE's columns), per GPU and summed over GPUs
_ESTIMATE = _floats(
    "base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle", "ci95_low", "ci95_high"
) + [("significant", _bool), ("share", _f64)]


DIFF_TABLES: dict[str, pa.Schema] = {
    "attribution": pa.schema(
        [
            ("contributor_id", _str),
            ("kind", _str),
            ("name", _str),
            ("phase", _str),
            ("device_id", _i32),
        ]
        + _ESTIMATE
        + _floats("base_count_per_cycle", "head_count_per_cycle")
        + [("status", _str), ("base_runs", pa.uint32()), ("head_runs", pa.uint32())]
        + [("consistent", _bool), ("base_name", _str), ("head_name", _str)]
    ),
    "cycles": pa.schema(
        [("side", _str), ("cycle", _i64), ("device_id", _i32)]
        + [(n, _i64) for n in ("start_ns", "end_ns", "span_ns", "busy_ns", "idle_ns", "wall_ns")]
        + [("critical", _bool)]
    ),
    "events": pa.schema(
        [
            ("side", _str),
            ("cycle", _i64),
            ("device_id", _i32),
            ("stream_id", _i64),
            ("kind", _str),
            ("name", _str),
            ("rel_start_ns", _i64),
            ("rel_end_ns", _i64),
            ("duration_ns", _i64),
            ("slot", _i64),
            ("contributor_id", _str),
            ("status", _str),
            ("grid", _str),
            ("block", _str),
        ]
    ),
    "across_gpus": pa.schema(
        [
            ("kind", _str),
            ("name", _str),
            ("phase", _str),
            ("devices", _i64),
            ("top_device_id", _i32),
            ("top_device_delta_ms_per_cycle", _f64),
        ]
        + _ESTIMATE
    ),
    "host": pa.schema(
        [("phase", _str)]
        + _floats(
            "base_ms_per_cycle", "head_ms_per_cycle", "delta_ms_per_cycle", "ci95_low", "ci95_high"
        )
        + [("significant", _bool)]
    ),
    "collectives": pa.schema(
        [("op", _str), ("dtype", _str), ("bytes", _i64), ("device_id", _i32)]
        + _floats(
            "base_ms_per_cycle",
            "head_ms_per_cycle",
            "base_wait_ms_per_cycle",
            "head_wait_ms_per_cycle",
            "base_transfer_ms_per_cycle",
            "head_transfer_ms_per_cycle",
            "delta_ms_per_cycle",
        )
    ),
    "totals": pa.schema(
        [
            ("kind", _str),
            ("name", _str),
            ("base_ms", _f64),
            ("head_ms", _f64),
            ("delta_ms", _f64),
            ("base_count", _i64),
            ("head_count", _i64),
        ]
    ),
    "sources": pa.schema(
        [
            ("contributor_id", _str),
            ("file", _str),
            ("line", _i32),
            ("function", _str),
            ("share", _f64),
        ]
    ),
    "launch_stacks": pa.schema(
        [
            ("contributor_id", _str),
            ("side", _str),
            ("stack_id", _i64),
            ("share", _f64),
            ("depth", _i32),
            ("file", _str),
            ("line", _i32),
            ("function", _str),
        ]
    ),
}


def empty_diff(table: str) -> pa.Table:
    """An empty diff table of the given kind (DIFF_TABLES)."""
    return DIFF_TABLES[table].empty_table()


def _polars(sch: pa.Schema) -> pl.Schema:
    frame = pl.from_arrow(sch.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.schema


_POLARS = {name: _polars(sch) for name, sch in DIFF_TABLES.items()}


def frame_schema(table: str) -> pl.Schema:
    """`DIFF_TABLES[table]` as the polars types of the engine's frames."""
    return _POLARS[table]


def empty_frame(table: str) -> pl.DataFrame:
    """A diff table with no rows (and all its columns), as a polars frame."""
    return pl.DataFrame(schema=_POLARS[table])


def conform_diff(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with exactly the columns of diff table `table`, in its order and types: how the
    engine builds every frame of a `Comparison`.

    A frame without columns is the table with no rows. A string column may stay dictionary-
    encoded in memory (Categorical, or an Enum whose order is the rows' sort order: totals'
    kind); any other type that differs is cast. A column missing or extra is an error (an engine
    bug, not bad input).
    """
    want = _POLARS[table]
    if frame.width == 0:
        return empty_frame(table)
    if set(frame.columns) != set(want.names()):
        raise ValueError(
            f"diff table {table!r}: columns {sorted(set(frame.columns) ^ set(want.names()))} "
            "differ from tracediff/runs/schema.py"
        )
    have = frame.schema
    cols = []
    for name, dtype in want.items():
        got = have[name]
        if got == dtype or (dtype == pl.String and isinstance(got, (pl.Categorical, pl.Enum))):
            cols.append(pl.col(name))
        else:
            cols.append(pl.col(name).cast(dtype))
    return frame.select(cols)


def empty(table: str) -> pa.Table:
    """An empty table of the given kind."""
    return TABLES[table].empty_table()


def _as(col: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    """`col` cast to `to`, chunk by chunk as Arrow casts; strings to dictionary-encoded or
    narrow strings without pyarrow.compute (runs/arrowcols.py: what the reader casts)."""
    text = (pa.string(), pa.large_string())
    if to == arrowcols.DICT_STRING and col.type in text:
        return pa.chunked_array([arrowcols.encoded(c) for c in col.chunks], type=to)
    if to == pa.string() and col.type == pa.large_string():
        return pa.chunked_array([arrowcols.narrow(c) for c in col.chunks], type=to)
    if pa.types.is_dictionary(to) and pa.types.is_dictionary(col.type):
        return col.cast(to.value_type).cast(to)
    return col.cast(to)


def conform(table: str, data: pa.Table) -> pa.Table:
    """Return `data` with exactly the columns, order and types of schema `table`.

    Missing columns become null columns; extra columns are an error (a reader bug).
    """
    schema = TABLES[table]
    extra = set(data.column_names) - set(schema.names)
    if extra:
        raise ValueError(f"table {table!r} has unknown columns {sorted(extra)}")
    cols = []
    for field in schema:
        if field.name in data.column_names:
            col = data.column(field.name)
            if col.type != field.type:
                col = _as(col, field.type)
            cols.append(col)
        else:
            cols.append(pa.nulls(data.num_rows, field.type))
    return pa.Table.from_arrays(cols, schema=schema)


def older(table: str) -> pa.Schema:
    """`table`'s schema as format 1 wrote it (without ADDED_IN_2's columns)."""
    sch = TABLES[table]
    for c in ADDED_IN_2.get(table, ()):
        sch = sch.remove(sch.get_field_index(c))
    return sch


def upgrade(table: str, data: pa.Table) -> pa.Table:
    """A format-1 table with format 2's added columns, as nulls."""
    for c in ADDED_IN_2.get(table, ()):
        if c not in data.column_names:
            field = TABLES[table].field(c)
            data = data.append_column(field, pa.nulls(data.num_rows, field.type))
    return data


def validate(table: str, data: pa.Table, source: str) -> None:
    """Check that a table read from a run file matches its schema exactly."""
    validate_schema(table, data.schema, source)


def validate_schema(table: str, got: pa.Schema, source: str, old: bool = False) -> None:
    """`validate` on a schema alone (before reading some of the table's columns); `old`: as
    format 1 wrote it."""
    schema = older(table) if old else TABLES[table]
    if not got.remove_metadata().equals(schema):
        raise InputError(
            f"{source}: table {table!r} does not match tracediff's schema",
            "the run file is corrupt or was written by an incompatible tracediff; parse the report again",
        )
