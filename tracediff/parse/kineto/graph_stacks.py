"""CUDA-graph kernels → the launch stack of the capture-time launch that made their node.

Stage: parse (inside the Kineto reader, after the kernels are joined to their launching API call
by correlation). A replayed graph kernel links only to its `cudaGraphLaunch`, so its stack is
the replay site's. Where the trace also holds the graph's stream capture (the capture happened
inside the profiler window: `cudaStreamBeginCapture` … `cudaStreamEndCapture`, the launches in
between recorded, with their Python stacks, and running no kernel), each replayed kernel gets
the stack of the launch that created its node.

What Kineto records, and so what the mapping can rest on (checked on the H200 minispec traces,
tests/data/h200-suspects): a `cudaGraphLaunch` carries only `cbid` and `correlation` (no graph
handle), a replayed kernel only that correlation (no node id), and a capture-time launch no kernel
name (it ran nothing). The mapping is therefore by position: the k-th kernel of a replay (GPU
start order) ↔ the k-th kernel launch of the capture (host start order). It is made only where
that is sound, and otherwise the `cudaGraphLaunch` stack is kept and a warning says why:

- exactly one capture in the trace, begun and ended on one thread (Kineto names no graph in a
  `cudaGraphLaunch`, so with several captures a replay's graph is unknown);
- a replay counts (a `cudaGraphLaunch` started after the capture ended) only where its kernel
  count equals the capture's kernel launch count, and all such replays run one name sequence
  (replays of one graph run the same kernels; a mismatch means another graph or reordering);
- a replay's kernels run on one stream (then GPU start order is the capture's launch order;
  a graph with parallel branches may start its nodes in another order).

No Python loop over events: numpy/polars over the kernels and API calls.
"""

from __future__ import annotations

import polars as pl

LAUNCHES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
)
"""API calls that create a kernel node when captured (names with `_v\\d+` already stripped)."""

_BEGIN = ("cudaStreamBeginCapture", "hipStreamBeginCapture")
_END = ("cudaStreamEndCapture", "hipStreamEndCapture")
_REPLAY = ("cudaGraphLaunch", "hipGraphLaunch")


def assign(kern: pl.DataFrame, api: pl.DataFrame, path: object) -> tuple[pl.DataFrame, list[str]]:
    """(kernels with replayed graph kernels' `stack_id` set from their capture-time launch,
    warnings). Unchanged, without a warning, where the trace holds no capture or no replay."""
    if not kern.height or not api.height or "stack_id" not in api.columns:
        return kern, []
    replayed = kern["launch_api"].is_in(_REPLAY)
    if not replayed.any():
        return kern, []
    begin = api.filter(pl.col("name").is_in(_BEGIN))
    end = api.filter(pl.col("name").is_in(_END))
    if not begin.height and not end.height:
        return kern, []
    keep = f"{path}: CUDA-graph kernels keep their cudaGraphLaunch stack"
    if begin.height != 1 or end.height != 1:
        return kern, [
            f"{keep}: the trace holds {begin.height} stream captures begun and {end.height} "
            "ended, and Kineto names no graph in a cudaGraphLaunch (one capture is mapped)"
        ]
    b, e = begin.row(0, named=True), end.row(0, named=True)
    if (b["process_id"], b["thread_id"]) != (e["process_id"], e["thread_id"]) or not (
        b["start_ns"] < e["start_ns"]
    ):
        return kern, [f"{keep}: the stream capture's begin and end are not one thread's pair"]

    ran = kern["correlation_id"].drop_nulls().unique()
    nodes = api.filter(
        pl.col("name").is_in(LAUNCHES)
        & (pl.col("process_id") == b["process_id"])
        & (pl.col("thread_id") == b["thread_id"])
        & pl.col("start_ns").is_between(b["start_ns"], e["start_ns"], closed="none")
        & ~pl.col("correlation_id").is_in(ran.implode())  # captured, not run
    ).sort("start_ns", maintain_order=True)
    n = nodes.height
    if not n:
        return kern, [f"{keep}: the stream capture recorded no kernel launch"]

    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    k = kern.with_columns(idx.alias("_row"))
    rep = (
        k.filter(replayed & (pl.col("launch_start_ns") > e["start_ns"]))
        .sort("correlation_id", "start_ns", maintain_order=True)
        .with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).over("correlation_id").alias("_k"),
            pl.len().over("correlation_id").alias("_n"),
            pl.col("stream_id").n_unique().over("correlation_id").alias("_streams"),
        )
    )
    if not rep.height:
        return kern, []
    warnings = []
    other = rep.filter(pl.col("_n") != n)["correlation_id"].n_unique()
    if other:
        warnings.append(
            f"{keep} in {other} replays whose kernel count differs from the {n} kernel "
            "launches of the trace's one stream capture (another graph, or one captured earlier)"
        )
    rep = rep.filter(pl.col("_n") == n)
    if not rep.height:
        return kern, warnings
    if (rep["_streams"] > 1).any():
        return kern, [
            *warnings,
            f"{keep}: a replay's kernels run on several streams, so their start order need not "
            "be the capture's launch order",
        ]
    seqs = rep.group_by("correlation_id").agg(pl.col("name").sort_by("_k"))
    if seqs["name"].n_unique() > 1:
        return kern, [
            *warnings,
            f"{keep}: replays of the captured graph's size run different kernel sequences",
        ]
    stacks = nodes.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_k"),
        pl.col("stack_id").alias("_node_stack"),
    )
    got = rep.join(stacks, on="_k", how="left").select("_row", "_node_stack")
    k = k.join(got, on="_row", how="left", maintain_order="left")
    k = k.with_columns(pl.coalesce("_node_stack", "stack_id").alias("stack_id"))
    return k.drop("_row", "_node_stack"), warnings
