"""nsys function-trace NVTX ranges → the launch stack of every CPU-launched GPU op.

Stage: parse (nsys), after the tables are built. Input: the `nvtx_ranges`, `kernels` and
`memops` tables; output: kernels and memops with `stack_id`, and the `frames` and `stacks`
tables (tracediff/runs/schema.py).

`nsys profile --python-functions-trace=CONFIG.json` (nsys 2024.2+) wraps the named Python
functions in NVTX push/pop ranges on the calling thread, with no code change and no CPU
sampling (checked with nsys 2024.2.3 on the CPU development machine: a range per call, named
`module.function`, in the entry's domain). The range name does not say where the module ends
and the function (`Class.method`) begins, so frames are taken only from ranges in a domain named
`python:MODULE` (FUNCTION_DOMAIN; what `tracediff capture` writes into the config it makes):
file `MODULE` as a path (`pkg/mod.py`, relative to sys.path, as Kineto writes installed
packages), function the name after `MODULE.`, no line. Ranges of other domains (the user's own
annotations, NCCL's) are no frames.

A GPU op's stack is that of its launching API call: the innermost function range on the
launching thread holding the call's midpoint, resolved as for Kineto (parse/stacks/launch_stacks.py).
A CUDA-graph kernel or memset takes the stack of the call that created its node during stream
capture (graph_nodes.py: exact, by node id); where the report lacks that, the `cudaGraphLaunch`
call's stack, with a warning. nsys Python backtraces
(`--python-backtrace=cuda`) need CPU sampling and are not read (docs/launch-stacks.md).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from tracediff.parse.nsys import graph_nodes
from tracediff.parse.stacks import launch_stacks
from tracediff.runs import schema
from tracediff.runs.stackdomain import FUNCTION_DOMAIN

_OPS = ("kernels", "memops")


def add_stacks(
    tables: dict[str, pa.Table],
    nodes: pl.DataFrame | None = None,
    warnings: list[str] | None = None,
    path: str = "",
) -> dict[str, pa.Table]:
    """`tables` with `stack_id` set on kernels and memops, and `frames` and `stacks` added
    (empty, and stack_id null, without function-trace ranges). `nodes`: the report's graph-node
    creation events (graph_nodes.NODE_COLS; None: the report has no such table); a warning is
    appended to `warnings` for CUDA-graph ops that keep their cudaGraphLaunch stack."""
    out = tables.copy()  # a runs/deferred.py dict stays one: its tables not built yet stay so
    out["frames"], out["stacks"] = schema.empty("frames"), schema.empty("stacks")
    nv = function_ranges(tables["nvtx_ranges"])
    if not nv.height:
        return out
    cols = ["process_id", "launch_thread_id", "launch_start_ns", "launch_end_ns", "graph_node_id"]
    ops = pl.concat(
        [
            _frame(tables[t].select(cols))
            .with_row_index("_r")
            .with_columns(pl.lit(i, pl.Int8).alias("_t"))
            for i, t in enumerate(_OPS)
        ]
    )
    assert isinstance(ops, pl.DataFrame)
    ops = _at_node_creation(ops, nodes, tables, warnings, path)
    ops = ops.drop_nulls(["process_id", "launch_thread_id", "launch_start_ns"])
    if not ops.height:
        return out
    start = ops["launch_start_ns"].to_numpy()
    end = ops["launch_end_ns"].fill_null(ops["launch_start_ns"]).to_numpy()
    fp, ft, fs, fe = (nv[c].to_numpy() for c in ("process_id", "thread_id", "start_ns", "end_ns"))
    got = launch_stacks.resolve(
        ops["process_id"].to_numpy(), ops["launch_thread_id"].to_numpy(), start + (end - start) // 2,
        fp, ft, fs, fe, nv["text"],
    )  # fmt: skip
    if not got.frame_ids.size:
        return out
    which, row = ops["_t"].to_numpy(), ops["_r"].to_numpy()
    for i, t in enumerate(_OPS):
        sid = np.zeros(tables[t].num_rows, np.int64)
        sid[row[which == i]] = got.stack_id[which == i]
        col = pa.array(sid, mask=sid == 0)
        tab = tables[t]
        out[t] = tab.set_column(tab.schema.get_field_index("stack_id"), "stack_id", col)
    out["frames"], out["stacks"] = frame_tables(got)
    return out


def function_ranges(nvtx_ranges: pa.Table) -> pl.DataFrame:
    """The closed function-trace ranges (domains `python:MODULE`) of an `nvtx_ranges` table:
    process_id, thread_id, start_ns, end_ns and `text` (module TAB function: the frame's
    identity), for launch_stacks.resolve."""
    nv_all = pl.from_arrow(nvtx_ranges)
    assert isinstance(nv_all, pl.DataFrame)
    nv = nv_all.select(
        "process_id", "thread_id", "start_ns", "end_ns",
        pl.col("domain").cast(pl.String), pl.col("name").cast(pl.String),
        pl.col("range_kind").cast(pl.String),
    )  # fmt: skip
    assert isinstance(nv, pl.DataFrame)
    nv = nv.filter(
        pl.col("domain").str.starts_with(FUNCTION_DOMAIN)
        & (pl.col("range_kind") == "push_pop")
        & pl.col("end_ns").is_not_null()
        & pl.col("process_id").is_not_null()
        & pl.col("thread_id").is_not_null()
    )
    module = pl.col("domain").str.strip_prefix(FUNCTION_DOMAIN)
    return nv.with_columns(
        pl.concat_str(
            module,
            pl.lit("\t"),
            pl.when(pl.col("name").str.starts_with(module + "."))
            .then(pl.col("name").str.slice(module.str.len_chars() + 1))
            .otherwise(pl.col("name")),
        ).alias("text")  # module TAB function: the frame's identity
    )


def frame_tables(got: launch_stacks.Stacks) -> tuple[pa.Table, pa.Table]:
    """The `frames` and `stacks` run tables of resolved function-trace stacks: a frame's file
    is its module as a path (`pkg/mod.py`), its function the name after the module, no line."""
    import pyarrow.compute as pc  # late: its import builds ~290 wrappers

    st, dp, fr = got.stack_rows
    parts = pc.split_pattern(got.frame_texts.cast(pa.string()), "\t", max_splits=1)
    mod, fn = pc.list_element(parts, 0), pc.list_element(parts, 1)
    file = pc.binary_join_element_wise(pc.replace_substring(mod, ".", "/"), ".py", "")
    n = len(got.frame_ids)
    frames = pa.table(
        {"frame_id": got.frame_ids, "file": file, "line": pa.nulls(n, pa.int32()), "function": fn}
    )
    stacks = pa.table({"stack_id": st, "depth": dp, "frame_id": fr})
    return schema.conform("frames", frames), schema.conform("stacks", stacks)


def _at_node_creation(
    ops: pl.DataFrame,
    nodes: pl.DataFrame | None,
    tables: dict[str, pa.Table],
    warnings: list[str] | None,
    path: str,
) -> pl.DataFrame:
    """CUDA-graph ops resolved where their node was created (graph_nodes.py): the launch columns
    replaced by the creating call's thread and midpoint (start = end = it); the other graph ops
    keep their cudaGraphLaunch call, with a warning."""
    is_graph = ops["graph_node_id"].is_not_null()
    n_graph = int(is_graph.sum())
    if not n_graph:
        return ops
    pts = graph_nodes.creating_calls(
        nodes if nodes is not None else pl.DataFrame(schema=graph_nodes.NODE_COLS),
        _frame(tables["api_calls"]),  # read only where graph ops are
        ops["graph_node_id"],
    )
    kept = n_graph - int(pts.found.sum())
    if kept and warnings is not None:
        why = (
            f"the report has no graph-node events ({graph_nodes.NODE_EVENTS}; profile with "
            "--cuda-graph-trace=node)"
            if nodes is None
            else "their node's creation (the stream capture) is not in the report: capture the "
            "graph inside the profiling window, with --cuda-graph-trace=node"
        )
        warnings.append(
            f"{path}: {kept} of {n_graph} CUDA-graph kernels and memory ops keep their "
            f"cudaGraphLaunch stack: {why}"
        )
    if not pts.found.any():
        return ops
    found = pl.Series(pts.found)
    at = pl.Series(pts.t)
    return ops.with_columns(
        pl.when(found).then(pl.Series(pts.pid)).otherwise(pl.col("process_id")).alias("process_id"),
        pl.when(found).then(pl.Series(pts.tid)).otherwise(pl.col("launch_thread_id"))
        .alias("launch_thread_id"),
        pl.when(found).then(at).otherwise(pl.col("launch_start_ns")).alias("launch_start_ns"),
        pl.when(found).then(at).otherwise(pl.col("launch_end_ns")).alias("launch_end_ns"),
    )  # fmt: skip


def _frame(t: pa.Table) -> pl.DataFrame:
    df = pl.from_arrow(t)
    assert isinstance(df, pl.DataFrame)
    return df
