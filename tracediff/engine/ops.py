"""GPU operations of a run as one polars frame: kernels, copies, sets and collectives.

Stage: engine input. Input: a `Run`; output: a DataFrame with one row per GPU operation:
device_id, process_id, stream_id, start_ns, end_ns, duration_ns, kind (kernel | collective |
memcpy | memset), name (str), launch_thread_id, launch_start_ns, launch_end_ns, graph_node_id,
stack_id (the launch's Python stack, run table `stacks`; null: unknown), grid/block (the
launch dimensions as text), bytes. Rows in the run's order. `lean`: without the columns only
the kept ops read (the TUI's events, the replay): stream_id, graph_node_id, grid, block.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracediff.base import devorder
from tracediff.engine.result import OP_COLUMNS
from tracediff.parse.nccl import is_comm
from tracediff.runs.runfile import Run

_KERNEL_COLS = [
    *OP_COLUMNS,
    "stack_id",
    "name",
    *(f"{d}_{a}" for d in ("grid", "block") for a in "xyz"),
]
_MEMOP_COLS = [*OP_COLUMNS, "stack_id", "kind", "copy_kind", "bytes"]
KINDS = pl.Enum(["kernel", "collective", "memcpy", "memset"])
"""Op kinds: an enum (one byte per op, not a string)."""


def _frame(run: Run, table: str, columns: list[str]) -> pl.DataFrame:
    # not cached in the run (the ops frame replaces it), and only the columns used: a run file
    # then decompresses only their buffers
    df = pl.from_arrow(run.read(table, columns))
    assert isinstance(df, pl.DataFrame)
    return df


def gpu_ops(run: Run) -> pl.DataFrame:
    return gpu_ops_counted(run)[0]


def _config(df: pl.DataFrame, prefix: str) -> pl.Series:
    """`XxYxZ` of a launch dimension as a categorical. Configurations repeat, so the text is built
    once per distinct (x, y, z), not once per op."""
    dims = [pl.col(f"{prefix}_{a}") for a in "xyz"]
    pack = pl.when(pl.any_horizontal(d.is_not_null() for d in dims)).then(
        pl.sum_horizontal(
            d.fill_null(0).cast(pl.Int64) * (1 << s) for d, s in zip(dims, (42, 21, 0), strict=True)
        )
    )
    lazy = df.lazy()  # the packed column and the distinct texts: one collect_all
    distinct = lazy.select(*dims, pack.alias("_p")).unique("_p").drop_nulls("_p")
    text = distinct.select(
        pl.col("_p"),
        pl.concat_str(dims, separator="x", ignore_nulls=True).cast(pl.Categorical).alias(prefix),
    )
    packed_frame, text_frame = pl.collect_all([lazy.select(pack), text.sort("_p")])
    packed = packed_frame.to_series()
    if text_frame.height == 0:
        return pl.Series(prefix, [None] * packed.len(), pl.Categorical)
    # each op's text by its packed value's place among the few distinct ones (a binary search
    # and a gather of codes: 0.053 -> 0.031 CPU-s at 882 k kernels, against a hash replace)
    at = np.searchsorted(text_frame["_p"].to_numpy(), packed.fill_null(0).to_numpy())
    where = pl.Series("_i", at.astype(np.uint32)).to_frame()
    if packed.null_count():
        where = where.select(pl.when(packed.is_not_null()).then(pl.col("_i")).alias("_i"))
    return text_frame[prefix].gather(where.to_series()).alias(prefix)


KEPT_ONLY = ("stream_id", "graph_node_id")
"""Op columns only the kept ops read (with grid and block): a `lean` frame leaves them out."""


def gpu_ops_counted(run: Run, *, lean: bool = False) -> tuple[pl.DataFrame, int]:
    """(ops, how many kernels/copies were dropped for ending before they start or never ending).
    `lean`: no stream, graph node or launch dimensions (module doc), which a compare whose ops
    are not kept never reads: their columns are not decoded, the texts not made, and the
    segmentation's gather carries 4 columns less."""
    op_cols = [c for c in OP_COLUMNS if not (lean and c in KEPT_ONLY)]
    k_cols = [*op_cols, "stack_id", "name"] if lean else _KERNEL_COLS
    k = _frame(run, "kernels", k_cols)
    m = _frame(run, "memops", [*op_cols, "stack_id", "kind", "copy_kind", "bytes"])
    # Names stay categorical: one copy of each distinct string instead of one per op (5 M ops of
    # ~150-character kernel names are ~1 GB as plain strings). The regex runs per distinct name.
    names = k.select(pl.col("name").cast(pl.Categorical)).unique().drop_nulls()
    comm = names.filter(is_comm(pl.col("name").cast(pl.String)))["name"]
    dims = [] if lean else [_config(k, "grid"), _config(k, "block")]
    kernels = k.select(
        *op_cols,
        "stack_id",
        pl.col("name").cast(pl.Categorical).fill_null(pl.lit("<unnamed kernel>", pl.Categorical)),
        *dims,
        pl.lit(None, pl.Int64).alias("bytes"),
    ).with_columns(
        pl.when(pl.col("name").is_in(comm.implode()))
        .then(pl.lit("collective", KINDS))
        .otherwise(pl.lit("kernel", KINDS))
        .alias("kind"),
    )
    del k
    no_dims = [] if lean else [pl.lit(None, pl.Categorical).alias(c) for c in ("grid", "block")]
    memops = m.select(
        *op_cols,
        "stack_id",
        pl.when(pl.col("kind").cast(pl.String) == "memcpy")
        .then(
            pl.concat_str([pl.lit("Memcpy "), pl.col("copy_kind").cast(pl.String).fill_null("?")])
        )
        .otherwise(pl.lit("Memset"))
        .cast(pl.Categorical)
        .alias("name"),
        *no_dims,
        "bytes",
        pl.col("kind").cast(pl.String).cast(KINDS),
    )
    del m
    ops = pl.concat([kernels, memops], how="diagonal_relaxed") if memops.height else kernels
    n = ops.height
    del kernels, memops
    bad = ops.select(
        (pl.col("end_ns") < pl.col("start_ns")) | pl.col("end_ns").is_null()
    ).to_series()
    if bad.any():
        ops = ops.filter(~bad)
    # a column with no values at all (graph node ids without CUDA graphs, bytes without copies)
    # as one null scalar, not 8 bytes a row carried through every gather
    empty = [c for c in ops.columns if ops.height and ops[c].null_count() == ops.height]
    ops = ops.with_columns(pl.lit(None, ops.schema[c]).alias(c) for c in empty)
    # not sorted here: segmentation gathers the ops of its cycles once, in (device, start) order
    return ops, n - ops.height


def in_device_order(ops: pl.DataFrame) -> pl.DataFrame:
    """`ops` in (device, start, end) order, ties as they came (base/devorder.py), in one chunk:
    the order the range cut takes them in (engine/cycle/ranges.py `_tagged`), made here by one
    gather, so that the cut's and the launch search's columns are numpy views of it, not copies
    out of the kernels' and the copies' two chunks (x500: ~30 MB a side). Ops already in that
    order (a run file's kernels, no copies) are returned as they are, as are ops with a null key
    (the cut sorts those with polars)."""
    keys = ["device_id", "start_ns", "end_ns"]
    if ops.height < 2 or any(ops[c].null_count() for c in keys):
        return ops
    order = devorder.device_major(*(ops[c].to_numpy() for c in keys))
    if (np.diff(order) == 1).all():
        return ops
    return ops[pl.Series("_at", order.astype(np.uint32))]
