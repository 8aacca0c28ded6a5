"""nsys GPU activity and CUDA API tables → run-file tables (kernels, memops, api_calls,
syncs, devices), each GPU op joined to the API call that launched it.

Stage: parse (nsys). Input: raw polars frames from a `Source` (columns of `nsys_schema`);
output: Arrow tables of `tracediff.schema`. Vectorised: joins, sorted searches, no per-row Python.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.parse.nsys_columns import (
    Strings,
    by_start,
    code_column,
    finish,
    label_column,
    pid_of,
    tid_of,
)
from tracediff.parse.nsys_schema import COPY_KINDS, GPU, SYNC_KINDS, TID_BITS


def launch_keys(api: pl.DataFrame) -> pl.DataFrame:
    """(process, correlationId) → launching thread, API name id and times."""
    return api.filter(
        pl.col("correlationId").is_not_null() & (pl.col("correlationId") != 0)
    ).select(
        (pl.col("globalTid") - pl.col("globalTid") % TID_BITS).alias("globalPid"),
        "correlationId",
        tid_of("globalTid").alias("launch_thread_id"),
        pl.col("nameId").alias("_launch_name"),
        pl.col("start").alias("launch_start_ns"),
        pl.col("end").alias("launch_end_ns"),
    )


def _launch_join(ops: pl.DataFrame, keys: pl.DataFrame) -> pl.DataFrame:
    """Left-join each GPU op to its launch call; an id seen twice in a process keeps the first.

    A binary search on one packed int64 key (process rank, correlationId) instead of a hash join
    on two columns: the API table is in correlationId order within each process, so sorting it
    is at most a stable radix sort on the process rank (8 processes, 5 M launches: ~10x less CPU
    than the polars join).
    """
    on = ["globalPid", "correlationId"]
    if ops.is_empty():
        return ops.join(keys.clear(), on=on, how="left")
    if keys.is_empty():
        return ops.join(keys, on=on, how="left")
    packed = _packer(keys["globalPid"], keys["correlationId"])
    if packed is None:  # correlation ids too large or negative to pack: hash join
        out = ops.join(keys, on=on, how="left", maintain_order="left")
        if out.height != ops.height:
            keys = keys.unique(subset=on, keep="first", maintain_order=True)
            out = ops.join(keys, on=on, how="left", maintain_order="left")
        return out
    kk, rank = packed(keys["globalPid"], keys["correlationId"])
    order = None
    if not _is_sorted(kk):
        order = np.argsort(rank, kind="stable")  # radix sort on a small int
        if not _is_sorted(kk[order]):
            order = np.argsort(kk, kind="stable")
        kk = kk[order]
    q, _ = packed(ops["globalPid"], ops["correlationId"])
    pos = np.minimum(np.searchsorted(kk, q), len(kk) - 1)
    found = (kk[pos] == q) & (q >= 0)
    idx = pl.Series("_i", pos if order is None else order[pos])
    if not found.all():
        idx = idx.set(pl.Series(~found), None)
    # gather by expression: a null index gives a null row (also when no index is valid)
    return pl.concat([ops, keys.drop(on).select(pl.all().gather(idx))], how="horizontal")


def _is_sorted(a: np.ndarray) -> bool:
    return bool((a[1:] >= a[:-1]).all())


_Pack = Callable[[pl.Series, pl.Series], tuple[np.ndarray, np.ndarray]]


def _packer(pid: pl.Series, cid: pl.Series) -> _Pack | None:
    """A function (process, correlationId) → (packed key, process rank), or None.

    Keys are rank << bits | correlationId over the processes and id range of the API table;
    a pair that cannot match (null, unknown process, id out of range) packs to -1.
    """
    pids = pid.drop_nulls().unique().sort().to_numpy()
    lo, hi = cid.min(), cid.max()
    if not len(pids) or not isinstance(lo, int) or not isinstance(hi, int) or lo < 0:
        return None
    bits = hi.bit_length()
    if len(pids) >= 1 << max(0, 62 - bits):
        return None
    rank_dtype = np.uint8 if len(pids) <= 256 else np.int64

    def pack(p: pl.Series, c: pl.Series) -> tuple[np.ndarray, np.ndarray]:
        pn = p.fill_null(-1).to_numpy()
        cn = c.fill_null(-1).to_numpy()
        rank = np.minimum(np.searchsorted(pids, pn), len(pids) - 1)
        ok = (pids[rank] == pn) & (cn >= 0) & (cn <= hi)
        if p.null_count():
            ok &= p.is_not_null().to_numpy()
        key = (rank.astype(np.int64) << bits) | cn
        return np.where(ok, key, -1), rank.astype(rank_dtype)

    return pack


def _common(df: pl.DataFrame) -> list[pl.Expr | str]:
    return [
        pl.col("deviceId").alias("device_id"),
        pid_of("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        pl.col("correlationId").alias("correlation_id"),
        pl.col("graphNodeId").alias("graph_node_id"),
        "launch_thread_id", "launch_start_ns", "launch_end_ns",
    ]  # fmt: skip


def kernels_table(
    df: pl.DataFrame, keys: pl.DataFrame, strings: Strings, api_names: Strings
) -> pa.Table:
    df = _launch_join(by_start(df), keys)
    out = df.select(
        *_common(df),
        *[pl.col(f"{g}{a.upper()}").alias(f"{g}_{a}") for g in ("grid", "block") for a in "xyz"],
        pl.col("registersPerThread").alias("registers_per_thread"),
        pl.col("staticSharedMemory").alias("static_shared_memory_bytes"),
        pl.col("dynamicSharedMemory").alias("dynamic_shared_memory_bytes"),
    )  # fmt: skip
    return finish("kernels", out, {
        "name": strings.lookup(df["demangledName"]),
        "short_name": strings.lookup(
            df["shortName"].fill_null(df["demangledName"])
            if df["shortName"].null_count()
            else df["shortName"]
        ),
        "launch_api": api_names.lookup(df["_launch_name"]),
    })  # fmt: skip


def memops_table(
    cp: pl.DataFrame, ms: pl.DataFrame, keys: pl.DataFrame, api_names: Strings,
    copy_kinds: dict[int, str], mem_kinds: dict[int, str],
) -> pa.Table:  # fmt: skip
    cp = cp.with_columns(
        pl.lit(0, pl.Int32).alias("_kind"), pl.lit(None, pl.Int64).alias("memKind")
    )
    ms = ms.with_columns(
        pl.lit(1, pl.Int32).alias("_kind"),
        *[pl.lit(None, pl.Int64).alias(c) for c in ("copyKind", "srcKind", "dstKind")],
    )
    df = pl.concat([cp, ms.select(cp.columns)])
    df = _launch_join(by_start(df), keys)
    return finish("memops", df.select(*_common(df), "bytes"), {
        "kind": code_column(df["_kind"], ["memcpy", "memset"]),
        "copy_kind": label_column(df["copyKind"], copy_kinds),
        "src_kind": label_column(df["srcKind"], mem_kinds),
        # a memset writes to memory of kind memKind
        "dst_kind": label_column(df["dstKind"].fill_null(df["memKind"]), mem_kinds),
        "launch_api": api_names.lookup(df["_launch_name"]),
    })  # fmt: skip


def api_calls_table(api: pl.DataFrame, api_names: Strings) -> pa.Table:
    api = by_start(api)
    out = api.select(
        pid_of("globalTid").alias("process_id"),
        tid_of("globalTid").alias("thread_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        pl.col("correlationId").alias("correlation_id"),
        pl.col("returnValue").alias("return_value"),
    )
    kind = (api["eventClass"] == 1).cast(pl.Int32)  # ENUM_NSYS_EVENT_CLASS: 0 runtime, 1 driver
    return finish("api_calls", out, {
        "name": api_names.lookup(api["nameId"]),
        "api_kind": code_column(kind, ["runtime", "driver"]),
    })  # fmt: skip


def devices_table(
    gpu: pl.DataFrame, seen: pl.Series, has_table: bool, warnings: list[str], src: str
) -> pa.Table:
    out = gpu.select(
        pl.col("id").alias("device_id"),
        "name",
        pl.col("smCount").alias("sm_count"),
        pl.col("totalMemory").alias("memory_bytes"),
        pl.col("busLocation").alias("bus_location"),
        "uuid",
        pl.concat_str(pl.col("computeMajor"), pl.lit("."), pl.col("computeMinor")).alias(
            "compute_capability"
        ),
        pl.col("clockRate").alias("clock_hz"),
    ).unique(subset=["device_id"], keep="first", maintain_order=True)
    extra = seen.unique().sort().filter(~seen.unique().sort().is_in(out["device_id"].implode()))
    if not has_table and len(extra):
        warnings.append(
            f"{src}: no {GPU} table: GPU names and properties are unknown "
            "(devices listed from the events)"
        )
    if len(extra):
        out = pl.concat([out, pl.DataFrame({"device_id": extra})], how="diagonal_relaxed")
    return finish("devices", out.sort("device_id"), {})


def syncs_table(df: pl.DataFrame) -> pa.Table:
    df = by_start(df)
    out = df.select(
        pl.col("deviceId").alias("device_id"),
        pid_of("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        pl.col("eventId").alias("event_id"),
        pl.col("correlationId").alias("correlation_id"),
    )
    return finish("syncs", out, {"sync_kind": label_column(df["syncType"], SYNC_KINDS)})


def enum_labels(df: pl.DataFrame, present: bool, fallback: dict[int, str]) -> dict[int, str]:
    if not present:
        return fallback
    return {int(i): str(lab or name) for i, name, lab in df.iter_rows() if i is not None}


def short_copy_kinds(labels: dict[int, str]) -> dict[int, str]:
    """ENUM labels read 'Device-to-Device'; keep the conventional short form (DtoD)."""
    return {**labels, **COPY_KINDS}
