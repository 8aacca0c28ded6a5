"""NCCL kernel-name decoding and the collectives table, shared by every reader.

Stage: parse. Input: the kernels and nvtx_ranges tables; output: the collectives table.

Kernel names are decoded *as named*: since NCCL 2.19 the symbol is the specialised entry point
(`ncclDevKernel_AllReduce_Sum_bf16_RING_LL`), which does not say which algorithm or protocol ran.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import pyarrow as pa

from tracediff.runs import schema
from tracediff.runs.arrowcols import series

# Kernels that are communication (HTA's rule, plus RCCL/custom all-reduce names).
COMM_PATTERN = r"^(nccl|rccl|ncclDevKernel|ncclKernel|ncclSym)|cross_device_reduce"

_OPS = (
    "AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|Send|Recv|AllToAll|Generic"
    "|AllGatherV"
)
_RED = "Sum|Prod|Max|Min|PreMulSum|SumPostDiv|Avg|MinMax"
_ALGO = "RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT"
_PROTO = "LL128|LL|SIMPLE"
# <= 2.18: ncclKernel_AllReduce_RING_LL_Sum_float(...)
_OLD = (
    rf"^nccl(?:Kernel|Function)_(?P<op>{_OPS})_(?P<algo>{_ALGO})_(?P<proto>{_PROTO})"
    rf"_(?P<red>{_RED})_(?P<dtype>[A-Za-z0-9_]+?)(?:\(|$)"
)
# >= 2.19: ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...), ncclDevKernel_SendRecv(...),
# ncclSymDevKernel_AllReduce_..., ncclSymkDevKernel_...
_NEW = (
    rf"^nccl(?:Sym|Symk)?DevKernel_(?P<op>{_OPS})(?:_(?P<red>{_RED})_(?P<dtype>[A-Za-z0-9]+?))?"
    rf"(?:_(?P<algo>{_ALGO})_(?P<proto>{_PROTO}))?(?:_[A-Za-z0-9]+)*(?:\(|$)"
)

# Kineto's collective name → NCCL op name
_KINETO_OPS = {
    "allreduce": "AllReduce",
    "all_reduce": "AllReduce",
    "_allgather_base": "AllGather",
    "allgather": "AllGather",
    "all_gather": "AllGather",
    "all_gather_into_tensor": "AllGather",
    "_reduce_scatter_base": "ReduceScatter",
    "reduce_scatter": "ReduceScatter",
    "reduce_scatter_tensor": "ReduceScatter",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "send": "Send",
    "recv": "Recv",
    "alltoall": "AllToAll",
    "all_to_all": "AllToAll",
    "alltoall_base": "AllToAll",
}


def is_comm(name: pl.Expr) -> pl.Expr:
    return name.str.contains(COMM_PATTERN)


def decode(names: pl.Series) -> pl.DataFrame:
    """Decode NCCL kernel names into op, reduce_op, dtype, algorithm, protocol (null if unnamed).
    The regexes run once per distinct name (a run's NCCL kernels have a few dozen; 1.2 M
    kernels of an 8-GPU report: ~0.25 s a side of regexes per row), each row takes its name's."""
    df = pl.DataFrame({"s": names.cast(pl.String)})
    decoded = (
        df.unique(maintain_order=True)
        .with_columns(
            pl.col("s").str.extract_groups(_OLD).alias("o"),
            pl.col("s").str.extract_groups(_NEW).alias("n"),
        )
        .select(
            "s",
            *(
                pl.coalesce(pl.col("o").struct.field(a), pl.col("n").struct.field(a)).alias(b)
                for a, b in [
                    ("op", "op"),
                    ("red", "reduce_op"),
                    ("dtype", "dtype"),
                    ("algo", "algorithm"),
                    ("proto", "protocol"),
                ]
            ),
        )
    )
    return df.join(decoded, on="s", how="left", maintain_order="left", nulls_equal=True).drop("s")


# NCCL API ranges that are collectives or point-to-point transfers (not ncclGroupStart/End,
# ncclCommInitRank, ncclCommCount...).
_NVTX_COLL = rf"^nccl(?P<op>{_OPS})$"


def _comm_rows(names: pa.Array) -> pl.Series:
    """Row mask of communication kernels; the regex runs once per distinct name, not per row."""
    return _rows_where(names, lambda s: s.str.contains(COMM_PATTERN))


def _rows_where(
    col: pa.Array | pa.ChunkedArray, test: Callable[[pl.Series], pl.Series]
) -> pl.Series:
    """Row mask of a string column (null: False); on a dictionary column `test` runs once per
    distinct value, not per row."""
    if pa.types.is_dictionary(col.type):
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        hit = test(series(arr.dictionary).cast(pl.String))
        return hit.gather(series(arr.indices)).fill_null(False)  # a null index: null, False
    return test(series(col).cast(pl.String)).fill_null(False)


KERNEL_COLUMNS = [
    "device_id", "process_id", "stream_id", "launch_thread_id", "start_ns", "end_ns",
    "duration_ns", "name", "correlation_id",
]  # fmt: skip
"""The kernel columns `collectives_from` reads (a reader may hand it just these)."""


def collectives_from(kernels: pa.Table, nvtx: pa.Table, api: pa.Table | None = None) -> pa.Table:
    """Collectives: every NCCL kernel (source=kernel) plus NCCL-domain NVTX ranges (source=nvtx).

    NVTX rows are the collective and point-to-point API ranges only (ncclAllReduce, ncclSend...;
    not ncclGroupStart/End). Their `bytes` stay null: NCCL puts the message size in an extended
    NVTX payload, which tracediff does not decode yet (the binary layout is not validated).
    """
    del api  # the range → launch join is done by the engine, which has cycles and threads
    parts: list[pl.DataFrame] = []
    if kernels.num_rows:
        mask = _comm_rows(kernels.column("name"))
        k = pl.DataFrame(kernels.select(KERNEL_COLUMNS)).filter(mask)
    else:
        k = pl.DataFrame()
    if k.height:
        dec = decode(k["name"])
        parts.append(pl.concat([
            k.select(
                pl.lit("kernel").alias("source"), "device_id", "process_id", "stream_id",
                pl.col("launch_thread_id").alias("thread_id"), "start_ns", "end_ns", "duration_ns",
                pl.col("name").cast(pl.String),
            ),
            dec,
            k.select("correlation_id"),
        ], how="horizontal"))  # fmt: skip
    n = pl.DataFrame(nvtx)
    if nvtx.num_rows:  # NCCL-domain ranges that are collectives, tested per distinct value
        n = n.filter(
            _rows_where(nvtx.column("domain"), lambda s: s == "NCCL")
            & _rows_where(nvtx.column("range_kind"), lambda s: s != "mark")
            & _rows_where(nvtx.column("name"), lambda s: s.str.contains(_NVTX_COLL))
        )
    if n.height:
        parts.append(n.select(
            pl.lit("nvtx").alias("source"), "device_id", "process_id",
            pl.lit(None, pl.Int64).alias("stream_id"),
            "thread_id", "start_ns", "end_ns", "duration_ns", pl.col("name").cast(pl.String),
            pl.col("name").cast(pl.String).str.replace(r"^nccl", "").alias("op"),
        ))  # fmt: skip
    if not parts:
        return schema.empty("collectives")
    df = pl.concat(parts, how="diagonal_relaxed")
    return schema.conform("collectives", df.to_arrow())


def kineto_op(name: pl.Expr) -> pl.Expr:
    """Map Kineto's `Collective name` to NCCL op names; unknown names are kept as given."""
    lower = name.str.to_lowercase()
    return lower.replace_strict(_KINETO_OPS, default=name)


DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "f32": 4,
    "double": 8,
    "float64": 8,
    "f64": 8,
    "half": 2,
    "float16": 2,
    "f16": 2,
    "bfloat16": 2,
    "bf16": 2,
    "int": 4,
    "int32": 4,
    "i32": 4,
    "long": 8,
    "int64": 8,
    "i64": 8,
    "char": 1,
    "int8": 1,
    "i8": 1,
    "byte": 1,
    "uint8": 1,
    "u8": 1,
    "bool": 1,
    "short": 2,
    "int16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
}


def dtype_bytes(dtype: pl.Expr) -> pl.Expr:
    """Size in bytes of a dtype as Kineto/NCCL name it (null when unknown)."""
    return dtype.str.to_lowercase().replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
