"""CUDA-graph ops (nsys) → the API call that created their graph node during stream capture.

Stage: parse (nsys), inside the stack step (stacks.py). Input: the node-creation events
(`CUDA_GRAPH_NODE_EVENTS`, nsys 2024.2+; `CUDA_GRAPH_EVENTS` with `graphNodeId` up to 2023.4:
domain-reference §1.1), the `api_calls` table and each op's `graph_node_id`; output: per op the
(process, thread, instant) its launch stack is resolved at -- the creating call's midpoint -- or
nothing where the report does not show who created its node.

With `--cuda-graph-trace=node` a replayed kernel or memset carries the `graphNodeId` of its node
in the *executable* graph, and links by correlation only to `cudaGraphLaunch`. The node events
give every node's creation (start, globalTid) and, for a node cloned when the graph was
instantiated, `originalGraphNodeId`: the node it was cloned from (checked on the H200 minispec
graph capture, tests/data/h200-suspects: 720 of 722 kernels carry a node id; each executable
node has a creation row inside `cudaGraphInstantiate` and a row naming its original, whose
creation row lies inside the capture-time `cudaLaunchKernel` / `cuLaunchKernelEx` /
`cudaMemsetAsync` on the capturing thread). So the match is exact, not by order: follow
`originalGraphNodeId` to the root node, take its creation, and the API call on that thread
whose interval holds it. A root created inside an instantiate, clone or exec-update call (its
capture is not in the report) is no match, and neither is a node the report has no creation of
(the capture ran before the profiling window): those ops keep the `cudaGraphLaunch` stack.
A creation no API call holds (an API the report did not trace) is resolved at its own instant.

Columns only, no loop over events: the chain is followed one join per cloning level (one or two).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from tracediff.parse.nsys.columns import pid_of, tid_of
from tracediff.parse.nsys.schema import ints

NODE_EVENTS = "CUDA_GRAPH_NODE_EVENTS"  # 2024.2+
GRAPH_EVENTS = "CUDA_GRAPH_EVENTS"  # held the node ids up to 2023.4
NODE_COLS = ints("start", "globalTid", "graphNodeId", "originalGraphNodeId")
NOT_CREATING = ("cudaGraphInstantiate", "cudaGraphExec", "cudaGraphClone", "cuGraphInstantiate",
                "cuGraphExec", "cuGraphClone")  # fmt: skip
"""API calls that make executable or cloned nodes: a root created there was not captured here."""
MAX_CLONES = 8  # cloning levels followed (instantiate is one; a graph of graphs adds levels)


def node_table(tables: set[str], columns: Callable[[str], list[str]]) -> str | None:
    """The table holding node-creation events in this export, or None (found by presence:
    `columns(table)` gives a table's column names)."""
    if NODE_EVENTS in tables:
        return NODE_EVENTS
    if GRAPH_EVENTS in tables and "graphNodeId" in columns(GRAPH_EVENTS):
        return GRAPH_EVENTS
    return None


class Points:
    """Per op: where its stack is resolved (`pid`, `tid`, `t`), `found` where a creating call
    (or creation instant) was matched; the other rows are unset."""

    def __init__(self, n: int) -> None:
        self.found = np.zeros(n, bool)
        self.pid = np.zeros(n, np.int64)
        self.tid = np.zeros(n, np.int64)
        self.t = np.zeros(n, np.int64)


def creating_calls(nodes: pl.DataFrame, api: pl.DataFrame, node_ids: pl.Series) -> Points:
    """For each op's `node_ids` (nulls: not a graph op) the instant its stack is resolved at."""
    out = Points(len(node_ids))
    if not nodes.height or node_ids.null_count() == len(node_ids):
        return out
    ev = nodes.drop_nulls(["graphNodeId", "start", "globalTid"])
    parent = (
        ev.group_by("graphNodeId")
        .agg(pl.col("originalGraphNodeId").drop_nulls().first().alias("_up"))
        .rename({"graphNodeId": "_id"})
    )
    created = (
        ev.filter(pl.col("originalGraphNodeId").is_null())
        .group_by("graphNodeId")
        .agg(
            pl.col("start").min().alias("_t"),
            pl.col("globalTid").sort_by("start").first().alias("_g"),
        )
        .rename({"graphNodeId": "_root"})
    )
    ops = pl.DataFrame({"_row": np.arange(len(node_ids)), "_root": node_ids}).drop_nulls("_root")
    for _ in range(MAX_CLONES):  # walk up to the node each was cloned from
        ops = ops.join(parent, left_on="_root", right_on="_id", how="left", maintain_order="left")
        if ops["_up"].null_count() == ops.height:
            ops = ops.drop("_up")
            break
        ops = ops.with_columns(pl.coalesce("_up", "_root").alias("_root")).drop("_up")
    else:
        return out  # a cloning chain this long is no graph nsys wrote: match nothing
    pts = ops.join(created, on="_root", how="inner").with_columns(
        pid_of("_g").alias("_pid"), tid_of("_g").alias("_tid")
    )
    if not pts.height:
        return out
    calls = (
        api.select(
            pl.col("process_id").alias("_pid"),
            pl.col("thread_id").alias("_tid"),
            pl.col("start_ns").alias("_cs"),
            pl.col("end_ns").alias("_ce"),
            pl.col("name").alias("_name"),
        )  # fmt: skip
        .drop_nulls(["_pid", "_tid", "_cs", "_ce"])
        .sort("_cs")
    )
    pts = pts.sort("_t").join_asof(  # both sorted by time (the check cannot see that)
        calls, left_on="_t", right_on="_cs", by=["_pid", "_tid"], strategy="backward",
        check_sortedness=False,
    )  # fmt: skip
    held = (pl.col("_ce") >= pl.col("_t")).fill_null(False)
    name = pl.col("_name").cast(pl.String)
    cloning = pl.any_horizontal(name.str.starts_with(p) for p in NOT_CREATING).fill_null(False)
    mid = pl.col("_cs") + (pl.col("_ce") - pl.col("_cs")) // 2
    pts = pts.filter(~(held & cloning)).with_columns(
        pl.when(held).then(mid).otherwise("_t").alias("_at")
    )
    rows = pts["_row"].to_numpy()
    out.found[rows] = True
    out.pid[rows] = pts["_pid"].to_numpy()
    out.tid[rows] = pts["_tid"].to_numpy()
    out.t[rows] = pts["_at"].to_numpy()
    return out
