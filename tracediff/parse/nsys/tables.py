"""nsys GPU activity and CUDA API tables → run-file tables (kernels, memops, api_calls,
syncs, devices), each GPU op joined to the API call that launched it.

Stage: parse (nsys). Input: raw polars frames from a `Source` (columns of `schema`);
output: Arrow tables of `tracediff.runs.schema`. Vectorised: joins, sorted searches, no per-row Python.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.base.sortedsearch import search_sorted
from tracediff.parse.nsys.columns import (
    Strings,
    by_start,
    code_column,
    finish,
    label_column,
    pid_of,
    tid_of,
)
from tracediff.parse.nsys.schema import COPY_KINDS, GPU, SYNC_KINDS, TID_BITS
from tracediff.runs import schema as run_schema
from tracediff.runs.deferred import Partial

_ON = ["globalPid", "correlationId"]


class LaunchIndex:
    """The launch calls by (process, correlationId), sorted once for every op table's join.

    One packed int64 key per call (process rank << bits | correlationId). Where the packed keys
    are in order already (one process, its calls in correlationId order: the usual report), a
    binary search over them answers each op (0.9 M kernels in 1 M calls, fresh process: ~40 ms,
    against ~65 ms for the direct table below, whose 32 MB of new pages are most of its cost).
    Otherwise, where they are dense enough (nsys numbers calls from 1 up, per process) and each
    occurs once, a direct table key -> row answers each op with one array read. Otherwise a
    binary search over the sorted keys: the API table is in correlationId order within each
    process, so sorting it is at most a stable radix sort on the process rank (gen8, 8
    processes, 5 M launches: ~10x less CPU than the polars join). Ids that cannot be packed
    (negative, or too wide for the number of processes) fall back to the hash join. Rows whose
    correlationId is null never match; an id seen twice matches its first call either way.
    """

    DENSITY = 8  # a direct table may have up to this many slots per call (int32: 32 B per call)

    def __init__(self, keys: pl.DataFrame) -> None:
        self.frame = keys
        self.payload = keys.drop(_ON)
        self.sorted: np.ndarray | None = None
        self.order: np.ndarray | None = None
        self.table: np.ndarray | None = None
        gp = keys["globalPid"]
        lo_p, hi_p = gp.min(), gp.max()
        if lo_p is not None and lo_p == hi_p:  # one process: no hash pass over every call
            self.pids = np.array([lo_p], dtype=np.int64)
        else:
            self.pids = gp.drop_nulls().unique().sort().to_numpy()
        lo, hi = keys["correlationId"].min(), keys["correlationId"].max()
        if not len(self.pids) or not isinstance(lo, int) or not isinstance(hi, int) or lo < 0:
            return
        self.hi, self.bits = hi, hi.bit_length()
        if len(self.pids) >= 1 << max(0, 62 - self.bits):
            return
        kk, rank = self.pack(gp, keys["correlationId"])
        if _is_sorted(kk):  # the usual report (one process, calls in id order): nothing to fill
            self.sorted = kk
            return
        size = len(self.pids) << self.bits
        if size <= self.DENSITY * len(kk) + (1 << 20):
            ok = kk >= 0
            rows = np.flatnonzero(ok).astype(np.int32)
            at = kk[ok] if len(rows) < len(kk) else kk
            table = np.full(size, -1, dtype=np.int32)
            table[at] = rows
            if np.array_equal(table[at], rows):  # every key once (else: the sorted search)
                self.table = table
                return
        if not _is_sorted(kk):
            self.order = np.argsort(rank, kind="stable")  # radix sort on a small int
            if not _is_sorted(kk[self.order]):
                self.order = np.argsort(kk, kind="stable")
            kk = kk[self.order]
        self.sorted = kk

    def pack(self, p: pl.Series, c: pl.Series) -> tuple[np.ndarray, np.ndarray]:
        """Packed keys (-1: cannot match: null, unknown process, id out of range) and ranks."""
        cn = c.fill_null(-1).to_numpy()
        ok = (cn >= 0) & (cn <= self.hi)
        if len(self.pids) == 1 and not p.null_count():  # the usual report: one process
            ok &= p.to_numpy() == self.pids[0]
            return np.where(ok, cn, -1), np.zeros(len(cn), np.uint8)
        pn = p.fill_null(-1).to_numpy()
        rank = np.minimum(search_sorted(self.pids, pn), len(self.pids) - 1)
        ok &= self.pids[rank] == pn
        if p.null_count():
            ok &= p.is_not_null().to_numpy()
        key = (rank.astype(np.int64) << self.bits) | cn
        return np.where(ok, key, -1), rank.astype(np.uint8 if len(self.pids) <= 256 else np.int64)

    def positions(self, p: pl.Series, c: pl.Series) -> tuple[np.ndarray, np.ndarray]:
        """Row of the launch frame for each (process, correlationId) pair, and whether it
        matched (a packable index only: `table` or `sorted` is set)."""
        q, _ = self.pack(p, c)
        if self.table is not None:
            pos = self.table[np.maximum(q, 0)]
            return pos, (q >= 0) & (pos >= 0)
        kk = self.sorted
        assert kk is not None
        pos = np.minimum(np.searchsorted(kk, q), len(kk) - 1)
        found = (kk[pos] == q) & (q >= 0)
        return (pos if self.order is None else self.order[pos]), found


def launch_keys(api: pl.DataFrame) -> LaunchIndex:
    """(process, correlationId) → launching thread, API name id and times."""
    return LaunchIndex(
        api.filter(pl.col("correlationId").is_not_null() & (pl.col("correlationId") != 0)).select(
            (pl.col("globalTid") - pl.col("globalTid") % TID_BITS).alias("globalPid"),
            "correlationId",
            tid_of("globalTid").alias("launch_thread_id"),
            pl.col("nameId").alias("_launch_name"),
            pl.col("start").alias("launch_start_ns"),
            pl.col("end").alias("launch_end_ns"),
        )
    )


def launch_join(ops: pl.DataFrame, index: LaunchIndex) -> pl.DataFrame:
    """`ops` (GPU activity rows with globalPid, correlationId) left-joined to their launch calls:
    `index.payload`'s columns added, in `ops`' order, null where no call matches (as polars'
    left join on the pair); an id seen twice in a process keeps its first call."""
    keys = index.frame
    if ops.is_empty():
        return ops.join(keys.clear(), on=_ON, how="left")
    if keys.is_empty():
        return ops.join(keys, on=_ON, how="left")
    if index.table is None and index.sorted is None:  # ids not packable: hash join
        out = ops.join(keys, on=_ON, how="left", maintain_order="left")
        if out.height != ops.height:
            keys = keys.unique(subset=_ON, keep="first", maintain_order=True)
            out = ops.join(keys, on=_ON, how="left", maintain_order="left")
        return out
    pos, found = index.positions(ops["globalPid"], ops["correlationId"])
    idx = pl.Series("_i", pos)
    if not found.all():
        idx = idx.set(pl.Series(~found), None)
    # gather by expression: a null index gives a null row (also when no index is valid)
    return pl.concat([ops, index.payload.select(pl.all().gather(idx))], how="horizontal")


def launch_rows(index: LaunchIndex, p: pl.Series, c: pl.Series) -> np.ndarray:
    """Row of `index.frame` matching each (process, correlationId) pair, -1 where none does;
    an id seen twice in a process matches its first row."""
    if not len(p) or index.frame.is_empty():
        return np.full(len(p), -1, np.int64)
    if index.table is None and index.sorted is None:  # ids not packable: hash join
        keys = index.frame.select(_ON).with_row_index("_r")
        keys = keys.unique(subset=_ON, keep="first", maintain_order=True)
        got = pl.DataFrame({_ON[0]: p, _ON[1]: c}).join(
            keys, on=_ON, how="left", maintain_order="left"
        )
        return got["_r"].cast(pl.Int64).fill_null(-1).to_numpy()
    pos, found = index.positions(p, c)
    return np.where(found, pos, -1)


def _is_sorted(a: np.ndarray) -> bool:
    return bool((a[1:] >= a[:-1]).all())


def _common(df: pl.DataFrame, graph: bool = True) -> list[pl.Expr | str]:
    """The columns kernels and copies share (`graph`: with the graph node id)."""
    return [
        pl.col("deviceId").alias("device_id"),
        pid_of("globalPid").alias("process_id"),
        pl.col("streamId").alias("stream_id"),
        pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        pl.col("correlationId").alias("correlation_id"),
        *([pl.col("graphNodeId").alias("graph_node_id")] if graph else []),
        "launch_thread_id", "launch_start_ns", "launch_end_ns",
    ]  # fmt: skip


def _later_columns() -> list[pl.Expr]:
    """The run-file columns of `schema.KERNEL_LATER`: graph node ids, launch dimensions."""
    return [
        pl.col("graphNodeId").alias("graph_node_id"),
        *[pl.col(f"{g}{a.upper()}").alias(f"{g}_{a}") for g in ("grid", "block") for a in "xyz"],
        pl.col("registersPerThread").alias("registers_per_thread"),
        pl.col("staticSharedMemory").alias("static_shared_memory_bytes"),
        pl.col("dynamicSharedMemory").alias("dynamic_shared_memory_bytes"),
    ]  # fmt: skip


def kernels_table(
    df: pl.DataFrame,
    keys: LaunchIndex,
    strings: Strings,
    api_names: Strings,
    later: Callable[[], pl.DataFrame] | None = None,
) -> pa.Table | Partial:
    """The kernels table. `later`: `df` lacks `schema.KERNEL_LATER`'s columns, and this reads
    them (with `start`) when first needed: the table is then a `Partial` of the others."""
    df = launch_join(by_start(df), keys)
    out = df.select(*_common(df, graph=False), *([] if later else _later_columns()))
    dicts = {
        "name": strings.lookup(df["demangledName"]),
        "short_name": strings.lookup(
            df["shortName"].fill_null(df["demangledName"])
            if df["shortName"].null_count()
            else df["shortName"]
        ),
        "launch_api": api_names.lookup(df["_launch_name"]),
    }
    if later is None:
        return finish("kernels", out, dicts)
    later_names = {e.meta.output_name() for e in _later_columns()}
    made = finish("kernels", out, dicts, only=[
        f.name for f in run_schema.TABLES["kernels"] if f.name not in later_names
    ])  # fmt: skip

    def rest() -> pa.Table:
        got = by_start(later())  # the rows in the order of `df`'s (the same starts, sorted)
        cols = got.select(_later_columns())
        return finish("kernels", cols, {}, only=cols.columns)

    return Partial(made, rest, run_schema.TABLES["kernels"])


def memops_table(
    cp: pl.DataFrame, ms: pl.DataFrame, keys: LaunchIndex, api_names: Strings,
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
    df = launch_join(by_start(df), keys)
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
