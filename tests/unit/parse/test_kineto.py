"""Kineto reader on real traces, cross-checked against an independent count of the JSON."""

from __future__ import annotations

import functools
import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracediff.parse.kineto import read_kineto, short_name
from tracediff.parse.load import detect, load
from tracediff.runs.runfile import read_run, write_run

DATA = Path(__file__).parent.parent.parent / "data"
KINETO = DATA / "kineto"
TRACES = [
    KINETO / n
    for n in (
        "base.json.gz",
        "eager_trace.json.gz",
        "gpu_only_trace.json.gz",
        "graph_execution.json.gz",
        "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "nccl_data.json.gz",
        "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
        "resnet50_num_workers_4.worker0.pt.trace.json.gz",
        "sampled_rank-0.json.gz",
        "sglang_Qwen3-8B_decode.json.gz",
        "step_based_trace_2543932.json.gz",
    )
] + [DATA / "h200" / "k_good.json.gz", DATA / "h200" / "k_bad.json.gz"]

KERNEL_CATS = {"kernel", "Kernel"}
MEMOP_CATS = {"gpu_memcpy", "gpu_memset", "Memcpy", "Memset"}
API_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


@functools.cache
def _doc(path: Path) -> dict[str, Any]:
    # exact decimals: the oracle must not share the reader's float handling
    return json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)


def _ns(v: Any) -> int:
    return int(Decimal(v) * 1000)


def _device(e: dict[str, Any]) -> int:
    a = e.get("args") or {}
    return int(a["device"]) if "device" in a else int(e["pid"])


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    return {}


def _run(runs: dict[str, Any], path: Path) -> Any:
    if path not in runs:
        runs[path] = read_kineto(path)
    return runs[path]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_kernels_per_device_match_plain_count(path: Path, runs: dict[str, Any]) -> None:
    doc = _doc(path)
    count: Counter[int] = Counter()
    total: Counter[int] = Counter()
    for e in doc["traceEvents"]:
        if e.get("cat") in KERNEL_CATS and e.get("ph") == "X":
            count[_device(e)] += 1
            total[_device(e)] += _ns(e["dur"])
    run = _run(runs, path)
    k = pl.from_arrow(run.tables["kernels"])
    assert isinstance(k, pl.DataFrame)
    got = k.group_by("device_id").agg(pl.len(), pl.col("duration_ns").sum())
    # ROCm agent ids the reader mapped to deviceProperties ids (agents.py), recorded in metadata
    agent = {int(a): d for a, d in run.metadata.get("device_id_map", {}).items()}
    assert {r[0]: r[1] for r in got.iter_rows()} == {agent.get(d, d): n for d, n in count.items()}
    assert {r[0]: r[2] for r in got.iter_rows()} == {agent.get(d, d): n for d, n in total.items()}
    assert count, "every bundled trace has kernels"


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_memops_and_api_calls_match_plain_count(path: Path, runs: dict[str, Any]) -> None:
    doc = _doc(path)
    evs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    mem = [e for e in evs if e.get("cat") in MEMOP_CATS]
    run = _run(runs, path)
    m = pl.from_arrow(run.tables["memops"])
    assert isinstance(m, pl.DataFrame)
    assert m.height == len(mem)
    assert m["bytes"].sum() == sum(int((e.get("args") or {}).get("bytes", 0)) for e in mem)
    assert run.tables["api_calls"].num_rows == sum(e.get("cat") in API_CATS for e in evs)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_start_times_are_exact_ns(path: Path, runs: dict[str, Any]) -> None:
    doc = _doc(path)
    want = sorted(
        _ns(e["ts"])
        for e in doc["traceEvents"]
        if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"
    )
    got = sorted(_run(runs, path).tables["kernels"].column("start_ns").to_pylist())
    assert got == want


def test_unix_us_timestamps_with_decimals_are_read_exactly(runs: dict[str, Any]) -> None:
    # ts ~1.7e15 µs with three decimals: a double is 0.25 µs coarse there
    path = KINETO / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    starts = _run(runs, path).tables["kernels"].column("start_ns").to_pylist()
    assert any(s % 1000 not in (0, 250, 500, 750) for s in starts)
    assert _run(runs, path).metadata["time_origin_utc_ns"] == 0


def test_launch_join_and_cuda_graph_kernels(runs: dict[str, Any]) -> None:
    path = DATA / "h200" / "k_good.json.gz"
    doc = _doc(path)
    graph_corr = {
        e["args"]["correlation"]
        for e in doc["traceEvents"]
        if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"
    }
    k = pl.from_arrow(_run(runs, path).tables["kernels"])
    assert isinstance(k, pl.DataFrame)
    assert k["launch_api"].null_count() == 0
    graph = k.filter(pl.col("correlation_id").is_in(list(graph_corr)))
    assert graph.height > len(graph_corr)  # one launch, many kernels
    assert set(graph["launch_api"].cast(pl.String)) == {"cudaGraphLaunch"}
    assert (k["launch_start_ns"] <= k["start_ns"]).all()
    assert set(k["process_id"]) == {1709} and set(k["launch_thread_id"]) <= {1709, 914438464}


def test_nccl_collectives_from_kernel_args_and_host_records(runs: dict[str, Any]) -> None:
    path = KINETO / "nccl_data.json.gz"
    doc = _doc(path)
    size = {"Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Byte": 1, "Double": 8}
    want_kernel, want_host = [], []
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if "Collective name" not in a:
            continue
        n = a["Out msg nelems"] if "allgather" in a["Collective name"] else a["In msg nelems"]
        (want_kernel if e.get("cat") == "kernel" else want_host).append(n * size[a["dtype"]])
    c = pl.from_arrow(_run(runs, path).tables["collectives"])
    assert isinstance(c, pl.DataFrame)
    kern = c.filter(pl.col("source") == "kernel")
    host = c.filter(pl.col("source") == "host")
    assert sorted(kern["bytes"].to_list()) == sorted(want_kernel) and want_kernel
    assert sorted(host["bytes"].to_list()) == sorted(want_host) and want_host
    assert set(kern["group_size"]) == {2} and set(c["rank"]) == {0}
    assert "AllReduce" in set(kern["op"].cast(pl.String))
    meta = _run(runs, path).metadata
    assert (meta["rank"], meta["world_size"], meta["nccl_version"]) == (0, 2, "2.17.1")


def test_annotations_profiler_steps_and_gpu_annotations(runs: dict[str, Any]) -> None:
    path = KINETO / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc = _doc(path)
    gpu = [e for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    r = pl.from_arrow(_run(runs, path).tables["nvtx_ranges"])
    assert isinstance(r, pl.DataFrame)
    g = r.filter(pl.col("device_id").is_not_null())
    assert sorted(g["device_id"]) == sorted(_device(e) for e in gpu) and gpu
    assert set(r["range_kind"].cast(pl.String)) == {"annotation"}
    cpu = r.filter(pl.col("device_id").is_null())
    assert cpu.height == sum(e.get("cat") == "user_annotation" for e in doc["traceEvents"])
    step = cpu.filter(pl.col("name").cast(pl.String) == "ProfilerStep#1")
    assert step.height == 1 and step["depth"][0] == 0
    inner = cpu.filter(
        (pl.col("start_ns") > step["start_ns"][0]) & (pl.col("end_ns") < step["end_ns"][0])
    )
    assert inner.height and (inner["depth"] >= 1).all()


def test_2021_schema_profiler_steps_from_operators(runs: dict[str, Any]) -> None:
    path = KINETO / "resnet50_num_workers_4.worker0.pt.trace.json.gz"
    doc = _doc(path)
    steps = [
        e
        for e in doc["traceEvents"]
        if e.get("cat") == "Operator" and e["name"].startswith("ProfilerStep#")
    ]
    run = _run(runs, path)
    r = pl.from_arrow(run.tables["nvtx_ranges"])
    assert isinstance(r, pl.DataFrame)
    assert sorted(r["name"].cast(pl.String)) == sorted(e["name"] for e in steps) and steps
    assert set(r["thread_id"]) == {int(steps[0]["tid"])}  # the 2021 schema writes tids as strings
    assert set(pl.from_arrow(run.tables["kernels"])["stream_id"]) == {7}  # tid "stream 7"


def test_rocm_device_ids_and_metadata(runs: dict[str, Any]) -> None:
    run = _run(runs, KINETO / "sglang_Qwen3-8B_decode.json.gz")
    # recorded on roctracer agent 9, the one GPU deviceProperties lists as 0 (agents.py)
    assert set(run.tables["kernels"].column("device_id").to_pylist()) == {0}
    assert run.metadata["platform"] == "rocm" and run.metadata["source_format"] == "kineto"
    good = _run(runs, DATA / "h200" / "k_good.json.gz").metadata
    doc = _doc(DATA / "h200" / "k_good.json.gz")
    assert good["time_origin_utc_ns"] == doc["baseTimeNanoseconds"]
    assert (good["cuda_driver_version"], good["world_size"], good["platform"]) == (13000, 1, "cuda")
    dev = _run(runs, DATA / "h200" / "k_good.json.gz").tables["devices"].to_pylist()
    assert dev[0]["name"] == "NVIDIA H200" and dev[0]["sm_count"] == 132


def test_memcpy_kinds_from_names(runs: dict[str, Any]) -> None:
    m = pl.from_arrow(_run(runs, DATA / "h200" / "k_good.json.gz").tables["memops"])
    assert isinstance(m, pl.DataFrame)
    cp = m.filter(pl.col("kind") == "memcpy")
    assert set(cp["copy_kind"].cast(pl.String)) == {"DtoD"} and set(
        cp["src_kind"].cast(pl.String)
    ) == {"Device"}
    assert set(m.filter(pl.col("kind") == "memset")["dst_kind"].cast(pl.String)) == {"Device"}


def test_short_names() -> None:
    assert (
        short_name(
            "void at::native::(anonymous namespace)::indexSelectSmallIndex<c10::BFloat16, long>"
            "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, int)"
        )
        == "indexSelectSmallIndex"
    )
    assert short_name(
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
    ) == ("ncclKernel_AllReduce_RING_LL_Sum_float")
    assert short_name("SubTensorOpWithScalar1d") == "SubTensorOpWithScalar1d"


def test_load_dispatch_and_run_file_round_trip(tmp_path: Path) -> None:
    path = KINETO / "step_based_trace_2543932.json.gz"
    assert detect(path) == "kineto"
    run = load(path)
    write_run(run, tmp_path / "r.arrow")
    back = read_run(tmp_path / "r.arrow")
    for name, table in run.tables.items():
        assert back.tables[name].equals(table), name
    assert back.metadata["source_format"] == "kineto" and run.tables["kernels"].num_rows == 130
    # a copy without the .gz name is still found by content
    plain = tmp_path / "trace.bin"
    plain.write_bytes(path.read_bytes())
    assert detect(plain) == "kineto" and load(plain).tables["kernels"].num_rows == 130
