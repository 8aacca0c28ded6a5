"""GPU operations of a run as one polars frame: kernels, copies, sets and collectives.

Stage: engine input. Input: a `Run`; output: a DataFrame with one row per GPU operation:
device_id, process_id, stream_id, start_ns, end_ns, duration_ns, kind (kernel | collective |
memcpy | memset), name (str), launch_thread_id, launch_start_ns, launch_end_ns, graph_node_id,
config (grid/block as text, the tie-breaker for alignment), bytes.
"""

from __future__ import annotations

import polars as pl

from tracediff.parse.nccl import is_comm
from tracediff.runfile import Run


def _frame(run: Run, table: str) -> pl.DataFrame:
    df = pl.from_arrow(run.read(table))  # not cached in the run: the ops frame replaces it
    assert isinstance(df, pl.DataFrame)
    return df


def gpu_ops(run: Run) -> pl.DataFrame:
    return gpu_ops_counted(run)[0]


def gpu_ops_counted(run: Run) -> tuple[pl.DataFrame, int]:
    """(ops, how many kernels/copies were dropped for ending before they start or never ending)."""
    k = _frame(run, "kernels")
    m = _frame(run, "memops")
    common = [
        "device_id",
        "process_id",
        "stream_id",
        "start_ns",
        "end_ns",
        "duration_ns",
        "launch_thread_id",
        "launch_start_ns",
        "launch_end_ns",
        "graph_node_id",
    ]
    # Names stay categorical: one copy of each distinct string instead of one per op (5 M ops of
    # ~150-character kernel names are ~1 GB as plain strings). The regex runs per distinct name.
    names = k.select(pl.col("name").cast(pl.Categorical)).unique().drop_nulls()
    comm = names.filter(is_comm(pl.col("name").cast(pl.String)))["name"]
    kernels = k.select(
        *common,
        pl.col("name").cast(pl.Categorical).fill_null(pl.lit("<unnamed kernel>", pl.Categorical)),
        # launch configurations repeat: categorical, like names
        pl.concat_str(
            [pl.col("grid_x"), pl.col("grid_y"), pl.col("grid_z")], separator="x", ignore_nulls=True
        )
        .cast(pl.Categorical)
        .alias("grid"),
        pl.concat_str(
            [pl.col("block_x"), pl.col("block_y"), pl.col("block_z")],
            separator="x",
            ignore_nulls=True,
        )
        .cast(pl.Categorical)
        .alias("block"),
        pl.lit(None, pl.Int64).alias("bytes"),
    ).with_columns(
        pl.when(pl.col("name").is_in(comm.implode()))
        .then(pl.lit("collective"))
        .otherwise(pl.lit("kernel"))
        .alias("kind"),
    )
    memops = m.select(
        *common,
        pl.when(pl.col("kind").cast(pl.String) == "memcpy")
        .then(
            pl.concat_str([pl.lit("Memcpy "), pl.col("copy_kind").cast(pl.String).fill_null("?")])
        )
        .otherwise(pl.lit("Memset"))
        .cast(pl.Categorical)
        .alias("name"),
        pl.lit(None, pl.Categorical).alias("grid"),
        pl.lit(None, pl.Categorical).alias("block"),
        "bytes",
        pl.col("kind").cast(pl.String),
    )
    ops = pl.concat([kernels, memops], how="diagonal_relaxed")
    n = ops.height
    del k, m, kernels, memops
    ops = ops.filter(pl.col("end_ns") >= pl.col("start_ns")).sort("device_id", "start_ns", "end_ns")
    return ops, n - ops.height
