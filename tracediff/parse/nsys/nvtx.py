"""NVTX_EVENTS → the `nvtx_ranges` table (domains named per process, depth, payloads).

Stage: parse (nsys). Input: the raw NVTX frame (ranges, marks and DomainCreate rows), StringIds,
NVTX_PAYLOAD_SCHEMA_ENTRIES; output: the `nvtx_ranges` Arrow table.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from tracediff.parse.intervals import nesting_depth
from tracediff.parse.nsys.columns import Strings, finish, label_column, pid_of, tid_of
from tracediff.parse.nsys.schema import NVTX_DOMAIN, NVTX_MARK, RANGE_KINDS
from tracediff.runs.stackdomain import FUNCTION_DOMAIN


def nvtx_table(
    df: pl.DataFrame, strings: Strings, payload: pl.DataFrame, warnings: list[str], src: str
) -> pa.Table:
    df = df.with_columns(
        pl.coalesce(pl.col("text"), strings.strings(df["textId"])).alias("name"),
        pid_of("globalTid").alias("_pidkey"),
    )
    # domainId is per process: name it from the DomainCreate row of the same process
    domains = (
        df.filter(pl.col("eventType") == NVTX_DOMAIN)
        .select("domainId", "_pidkey", pl.col("name").alias("domain"))
        .unique(subset=["domainId", "_pidkey"], keep="last")
    )
    r = df.filter(pl.col("eventType") != NVTX_DOMAIN).join(
        domains, on=["domainId", "_pidkey"], how="left", maintain_order="left"
    )
    r = _infer_nccl_domain(r, payload, warnings, src)
    r = r.with_columns(
        pl.when(pl.col("eventType") == NVTX_MARK)
        .then(pl.col("start"))
        .otherwise(pl.col("end"))
        .alias("end"),
        pl.coalesce("int64Value", "uint64Value", "int32Value", "uint32Value").alias("payload_int"),
        pl.coalesce("doubleValue", "floatValue").alias("payload_double"),
        pid_of("globalTid").alias("process_id"),
        tid_of("globalTid").alias("thread_id"),
        pl.when(pl.col("endGlobalTid").is_not_null())
        .then(tid_of("endGlobalTid"))
        .alias("end_thread_id"),
    )
    # function-trace ranges (parse/nsys/stacks.py) nest among themselves: turning the trace on
    # must not change the depth of the user's own ranges (cycles are found by them)
    r = r.with_columns(
        pl.col("domain").str.starts_with(FUNCTION_DOMAIN).fill_null(False).alias("_ft")
    )
    by = ["process_id", "thread_id", "_ft"]
    r = r.with_columns(nesting_depth(r, "start", "end", by).alias("depth"))
    r = r.sort("start", maintain_order=True)
    out = r.select(
        "process_id", "thread_id", "end_thread_id",
        pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
        (pl.col("end") - pl.col("start")).alias("duration_ns"),
        "domain", "name", "depth", "category", "payload_int", "payload_double",
    )  # fmt: skip
    return finish("nvtx_ranges", out, {"range_kind": label_column(r["eventType"], RANGE_KINDS)})


def _infer_nccl_domain(
    r: pl.DataFrame, payload: pl.DataFrame, warnings: list[str], src: str
) -> pl.DataFrame:
    """Name the NCCL domain where the export lost its DomainCreate row (time-sliced exports).

    Evidence required: the domain id registered NCCL's payload schemas ("NCCL communicator ID")
    and every range of that (process, domain) is named nccl*.
    """
    nccl_ids = payload.filter(pl.col("name") == "NCCL communicator ID")["domainId"].unique()
    if nccl_ids.is_empty() or r.is_empty():
        return r
    groups = (
        r.filter(
            pl.col("domain").is_null()
            & (pl.col("domainId") != 0)
            & pl.col("domainId").is_in(nccl_ids.implode())
        )
        .group_by("domainId", "_pidkey")
        .agg(pl.col("name").str.starts_with("nccl").all().alias("_all"), pl.len().alias("_n"))
        .filter(pl.col("_all"))
    )
    if groups.is_empty():
        return r
    warnings.append(
        f"{src}: no DomainCreate row for {groups['_n'].sum()} NVTX ranges; named their domain NCCL "
        "(it holds NCCL's payload schemas and only nccl* ranges)"
    )
    inferred = groups.select("domainId", "_pidkey", pl.lit("NCCL").alias("_inferred"))
    return r.join(
        inferred, on=["domainId", "_pidkey"], how="left", maintain_order="left"
    ).with_columns(pl.coalesce("domain", "_inferred").alias("domain"))
