"""A generated nsys report (tests/support/gen_nsys.py) written as per-rank PyTorch-profiler (Kineto) traces
of a multi-node job, each on its node's clock, named as torch.profiler's
`tensorboard_trace_handler` names them: `{hostname}_{pid}.{time_ms}.pt.trace.json`.

    from tests.support.gen_kineto_nodes import write_kineto_nodes
    write_kineto_nodes(one.sqlite, out_dir, gpus_per_node=8, clock_error_ns=[0, 5_300_000])

Process i (rank i, in process-id order, on GPU i % gpus_per_node of node i // gpus_per_node)
gets one trace: its kernels (`kernel`, pid = device, tid = stream, args device / stream /
correlation), its runtime calls (`cuda_runtime`, the same correlation), and a `ProfilerStep#N`
user annotation per `cycle` range; `distributedInfo` rank and world size; `baseTimeNanoseconds`
the report's session start plus its node's clock error (node n's clock is that far ahead, so
its tracer's origin places its events that much too late). `ts` / `dur` are µs with exact ns
decimals, as Kineto writes them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from tracediff.parse import load


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_kineto_nodes(
    src: Path,
    out: Path,
    gpus_per_node: int,
    clock_error_ns: Sequence[int],
    hosts: Sequence[str] | None = None,
) -> list[Path]:
    """Write one trace per rank into `out` (the module docstring); returns their paths."""
    run = load(src)
    origin = int(run.metadata["time_origin_utc_ns"])
    k = pl.from_arrow(run.table("kernels"))
    api = pl.from_arrow(run.table("api_calls"))
    nv = pl.from_arrow(run.table("nvtx_ranges"))
    assert isinstance(k, pl.DataFrame) and isinstance(api, pl.DataFrame)
    assert isinstance(nv, pl.DataFrame)
    pids = sorted(k["process_id"].unique().to_list())
    names = list(hosts or [f"node-{n}" for n in range(len(clock_error_ns))])
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, pid in enumerate(pids):
        node = rank // gpus_per_node
        ev: list[str] = []
        for r in (
            nv.filter((pl.col("process_id") == pid) & (pl.col("name") == "cycle"))
            .sort("start_ns")
            .with_row_index("n")
            .iter_rows(named=True)
        ):
            ev.append(
                f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{r["n"]}",'
                f'"pid":{pid},"tid":{pid},"ts":{_us(r["start_ns"])},'
                f'"dur":{_us(r["end_ns"] - r["start_ns"])},"args":{{}}}}'
            )
        for r in api.filter(pl.col("process_id") == pid).iter_rows(named=True):
            ev.append(
                f'{{"ph":"X","cat":"cuda_runtime","name":"{r["name"]}","pid":{pid},'
                f'"tid":{pid},"ts":{_us(r["start_ns"])},"dur":{_us(r["duration_ns"])},'
                f'"args":{{"correlation":{r["correlation_id"]}}}}}'
            )
        dev = rank % gpus_per_node
        for r in k.filter(pl.col("process_id") == pid).iter_rows(named=True):
            ev.append(
                f'{{"ph":"X","cat":"kernel","name":{json.dumps(r["name"])},"pid":{dev},'
                f'"tid":{r["stream_id"]},"ts":{_us(r["start_ns"])},"dur":{_us(r["duration_ns"])},'
                f'"args":{{"device":{dev},"stream":{r["stream_id"]},'
                f'"correlation":{r["correlation_id"]}}}}}'
            )
        head = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": len(pids)},
            "deviceProperties": [{"id": dev, "name": "NVIDIA H200"}],
            "baseTimeNanoseconds": origin + clock_error_ns[node],
        }
        path = out / f"{names[node]}_{pid}.{origin // 1_000_000}.pt.trace.json"
        text = json.dumps(head)[:-1] + ',"traceEvents":[' + ",".join(ev) + "]}"
        path.write_text(text)
        paths.append(path)
    return paths
