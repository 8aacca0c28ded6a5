"""Per-role Kineto frames → the run-file tables of `tracediff.runs.schema`.

Stage: parse (inside the Kineto reader). Input: one polars frame per role (roles.py); output:
the `kernels`, `memops`, `nvtx_ranges`, `collectives`, `api_calls` and `devices` Arrow tables.

Kineto's kernel "shared memory" is static + dynamic together; the schema keeps the two apart, so
both stay null rather than hold the sum.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl
import pyarrow as pa

from tracediff.parse import nccl
from tracediff.parse.intervals import nesting_depth
from tracediff.runs import schema

from .clock import to_int64

_TIMES = ("start_ns", "duration_ns", "end_ns")


def api_calls(runtime: pl.DataFrame, driver: pl.DataFrame) -> pl.DataFrame:
    """CUDA/HIP runtime and driver calls, by start time (an empty frame when there are none)."""
    b = pl.concat([runtime, driver])
    if not b.height:
        return pl.DataFrame()
    kind = ["runtime"] * runtime.height + ["driver"] * driver.height
    return b.select(
        pl.col("pid").alias("process_id"),
        pl.col("tid").alias("thread_id"),
        pl.col("name").str.replace(r"_v\d+$", ""),
        pl.Series("api_kind", kind, dtype=pl.String),
        pl.col("correlation").alias("correlation_id"),
        *_TIMES,
    ).sort("start_ns", maintain_order=True)


def launch_keys(api: pl.DataFrame) -> pl.DataFrame | None:
    """The launching API call of each correlation id (the first one), with its Python stack
    (stacks.py), for `_launch_join`; built once for kernels and copies alike (None without API
    calls)."""
    if not api.height:
        return None
    return (
        api.filter(pl.col("correlation_id").is_not_null())
        .select(
            pl.col("correlation_id"),
            pl.col("process_id").alias("_launch_pid"),
            pl.col("thread_id").alias("launch_thread_id"),
            pl.col("name").alias("launch_api"),
            pl.col("start_ns").alias("launch_start_ns"),
            pl.col("end_ns").alias("launch_end_ns"),
            pl.col("stack_id")
            if "stack_id" in api.columns
            else pl.lit(None, pl.Int64).alias("stack_id"),
        )
        .unique(subset=["correlation_id"], keep="first", maintain_order=True)
    )


def _launch_join(
    ops: pl.DataFrame, keys: pl.DataFrame | None, main_pid: int | None
) -> pl.DataFrame:
    """Attach the launching API call by correlation (graph kernels: their cudaGraphLaunch)."""
    if keys is not None:
        ops = ops.join(keys, on="correlation_id", how="left", maintain_order="left")
    else:
        ops = ops.with_columns(
            pl.lit(None, pl.Int64).alias("_launch_pid"),
            pl.lit(None, pl.Int64).alias("launch_thread_id"),
            pl.lit(None, pl.String).alias("launch_api"),
            pl.lit(None, pl.Int64).alias("launch_start_ns"),
            pl.lit(None, pl.Int64).alias("launch_end_ns"),
            pl.lit(None, pl.Int64).alias("stack_id"),
        )
    return ops.with_columns(
        pl.coalesce(pl.col("_launch_pid"), pl.lit(main_pid, pl.Int64)).alias("process_id")
    ).drop("_launch_pid")


def _gpu_base() -> list[Any]:
    """Device and stream from args, else from the event's pid/tid (Kineto puts them there)."""
    return [
        pl.coalesce("device", "pid").cast(pl.Int32, strict=False).alias("device_id"),
        pl.coalesce("stream", "tid").alias("stream_id"),
        pl.col("correlation").alias("correlation_id"),
        pl.col("name"),
        *_TIMES,
    ]


def _comm_columns() -> list[pl.Expr]:
    """Kineto's collective args (NCCL kernels, record_param_comms), underscored."""
    return [
        pl.col("coll").alias("_coll"),
        pl.col("in_nelems").alias("_in_nelems"),
        pl.col("out_nelems").alias("_out_nelems"),
        pl.col("dtype").alias("_dtype"),
        pl.col("group_size").cast(pl.Int32, strict=False).alias("_group_size"),
        pl.col("pg_name").alias("_comm_id"),
        pl.col("rank").cast(pl.Int32, strict=False).alias("_rank"),
    ]


def _xyz(col: str) -> list[pl.Expr]:
    """[x, y, z] lists → three int32 columns (null where absent)."""
    c = pl.col(col)
    return [
        c.list.get(i, null_on_oob=True).cast(pl.Int32, strict=False).alias(f"{col}_{a}")
        for i, a in enumerate("xyz")
    ]


def kernels(b: pl.DataFrame, keys: pl.DataFrame | None, main_pid: int | None) -> pl.DataFrame:
    """Kernels, with Kineto's collective args kept (underscored) for the collectives table."""
    if not b.height:
        return pl.DataFrame()
    df = b.select(
        *_gpu_base(),
        *_xyz("grid"),
        *_xyz("block"),
        pl.col("registers").cast(pl.Int32, strict=False).alias("registers_per_thread"),
        *_comm_columns(),
    ).sort("start_ns", maintain_order=True)
    return _launch_join(df, keys, main_pid)


def kernel_table(k: pl.DataFrame) -> pa.Table:
    if k.height == 0:
        return schema.empty("kernels")
    names = k["name"].unique().drop_nulls()
    short = pl.DataFrame({"name": names, "short_name": [short_name(n) for n in names]})
    k = k.join(short, on="name", how="left", maintain_order="left")
    cols = [c for c in schema.KERNELS.names if c in k.columns]
    return schema.conform("kernels", k.select(cols).to_arrow())


_COPY = r"^Memcpy\s+(?P<ck>\w+)(?:\s*\((?P<src>[^)]*?)\s*->\s*(?P<dst>[^)]*?)\))?"


def memops(
    cp: pl.DataFrame, ms: pl.DataFrame, keys: pl.DataFrame | None, main_pid: int | None
) -> pa.Table:
    parts = []
    for b, kind in ((cp, "memcpy"), (ms, "memset")):
        if not b.height:
            continue
        df = b.select(
            *_gpu_base(), pl.col("nbytes").alias("bytes"), pl.col("kind").alias("_kind_arg")
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
        keys,
        main_pid,
    )
    return schema.conform(
        "memops", df.select([c for c in schema.MEMOPS.names if c in df.columns]).to_arrow()
    )


def ranges(cpu: pl.DataFrame, gpu: pl.DataFrame, main_pid: int | None) -> pa.Table:
    """user_annotation / ProfilerStep#N on CPU threads; gpu_user_annotation on device streams."""
    parts = []
    if cpu.height:
        parts.append(
            cpu.select(
                pl.col("pid").alias("process_id"),
                pl.col("tid").alias("thread_id"),
                "name",
                pl.lit(None, pl.Int32).alias("device_id"),
                pl.lit(None, pl.Int64).alias("_lane"),
                *_TIMES,
            )
        )
    if gpu.height:
        parts.append(
            gpu.select(
                pl.lit(main_pid, pl.Int64).alias("process_id"),
                pl.lit(None, pl.Int64).alias("thread_id"),
                "name",
                pl.coalesce("device", "pid").cast(pl.Int32, strict=False).alias("device_id"),
                pl.coalesce("stream", "tid").alias("_lane"),
                *_TIMES,
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


def collectives(k: pl.DataFrame, host: pl.DataFrame, rank: int | None) -> pa.Table:
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


def host_comms(b: pl.DataFrame) -> pl.DataFrame:
    """c10d `record_param_comms` host records with their collective args."""
    if not b.height:
        return pl.DataFrame()
    return b.select(
        pl.col("pid").alias("process_id"),
        pl.col("tid").alias("thread_id"),
        *_comm_columns(),
        *_TIMES,
    )


def devices(props: Any, main_pid: int | None) -> pa.Table:
    rows = [p for p in props or [] if isinstance(p, dict)]
    if not rows:
        return schema.empty("devices")

    def cc(p: dict[str, Any]) -> str | None:
        ma, mi = p.get("computeMajor"), p.get("computeMinor")
        return f"{ma}.{mi}" if ma is not None and mi is not None else None

    df = pl.DataFrame(
        {
            "device_id": pl.Series(to_int64([p.get("id") for p in rows])).cast(
                pl.Int32, strict=False
            ),
            "process_id": pl.Series([main_pid] * len(rows), dtype=pl.Int64),
            "name": pl.Series([p.get("name") or None for p in rows], dtype=pl.String, strict=False),
            "sm_count": pl.Series(to_int64([p.get("numSms") for p in rows])).cast(
                pl.Int32, strict=False
            ),
            "memory_bytes": to_int64([p.get("totalGlobalMem") for p in rows]),
            "compute_capability": pl.Series([cc(p) for p in rows], dtype=pl.String),
        }
    )
    return schema.conform("devices", df.to_arrow())


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
