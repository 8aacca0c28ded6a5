"""Golden test: the smallest real nsys export (nsys-ai mock.sqlite, nsys 2026.1, schema 3.24).

Expected values were read from the file with the sqlite3 shell (joins on StringIds by hand,
`(globalTid >> 24) & 0xFFFFFF` for pids), not produced by tracediff.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from tracediff.parse.nsys.reader import read_nsys_sqlite

MOCK = Path(__file__).resolve().parent.parent.parent / "data" / "nsys" / "nsys-ai" / "mock.sqlite"
PID = 91186
FILL = (
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
    "std::array<char *, (unsigned long)1>>(int, T2, T3)"
)
REDUCE = (
    "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator ()"
    "(at::TensorIterator &)::[lambda(float, float) (instance 1)]>, unsigned int, float, "
    "(int)4>>(T3)"
)


def _read(table: str) -> pl.DataFrame:
    df = pl.from_arrow(read_nsys_sqlite(MOCK).table(table))
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col(pl.Categorical).cast(pl.String))


def test_kernels_golden() -> None:
    want = pl.DataFrame(
        {
            "device_id": [0, 0],
            "process_id": [PID, PID],
            "stream_id": [7, 7],
            "start_ns": [1517727052, 1535979030],
            "end_ns": [1517728492, 1535981719],
            "duration_ns": [1440, 2689],
            "name": [FILL, REDUCE],
            "short_name": ["vectorized_elementwise_kernel", "reduce_kernel"],
            "grid_x": [1, 1],
            "grid_y": [1, 1],
            "grid_z": [1, 1],
            "block_x": [128, 16],
            "block_y": [1, 1],
            "block_z": [1, 1],
            "registers_per_thread": [16, 28],
            "static_shared_memory_bytes": [0, 16],
            "dynamic_shared_memory_bytes": [0, 0],
            "correlation_id": [143, 159],
            "graph_node_id": [None, None],
            "launch_thread_id": [PID, PID],
            "launch_api": ["cudaLaunchKernel", "cudaLaunchKernel"],
            "launch_start_ns": [1500271671, 1518030155],
            "launch_end_ns": [1517708070, 1535794161],
        },
        schema_overrides={
            "device_id": pl.Int32, "grid_x": pl.Int32, "grid_y": pl.Int32, "grid_z": pl.Int32,
            "block_x": pl.Int32, "block_y": pl.Int32, "block_z": pl.Int32,
            "registers_per_thread": pl.Int32, "static_shared_memory_bytes": pl.Int32,
            "dynamic_shared_memory_bytes": pl.Int32, "graph_node_id": pl.Int64,
        },
    )  # fmt: skip
    # nsys reports carry no Python stacks (those come from Kineto with_stack traces): null
    want = want.with_columns(pl.lit(None, pl.Int64).alias("stack_id"))
    assert_frame_equal(_read("kernels"), want)


def test_api_calls_golden() -> None:
    rows = [
        (1304349703, 1304352711, "cuModuleGetLoadingMode", "driver", 1),
        (1327103658, 1327112413, "cudaGetDeviceProperties", "runtime", 127),
        (1498719457, 1499301305, "cudaStreamIsCapturing", "runtime", 134),
        (1499307953, 1500077430, "cudaMalloc", "runtime", 135),
        (1500271671, 1517708070, "cudaLaunchKernel", "runtime", 143),
        (1518030155, 1535794161, "cudaLaunchKernel", "runtime", 159),
        (1535956590, 1539525531, "cudaHostAlloc", "runtime", 167),
        (1539568563, 1540158067, "cudaMemcpyAsync", "runtime", 171),
        (1540164123, 1540180135, "cudaStreamSynchronize", "runtime", 172),
    ]
    start, end, name, kind, corr = (list(c) for c in zip(*rows, strict=True))
    want = pl.DataFrame(
        {
            "process_id": [PID] * 9,
            "thread_id": [PID] * 9,
            "start_ns": start,
            "end_ns": end,
            "duration_ns": [e - s for s, e in zip(start, end, strict=True)],
            "name": name,
            "api_kind": kind,
            "correlation_id": corr,
            "return_value": [0] * 9,
        }
    )
    assert_frame_equal(_read("api_calls"), want)


def test_memops_and_syncs_golden() -> None:
    want = pl.DataFrame(
        {
            "device_id": [0],
            "process_id": [PID],
            "stream_id": [7],
            "start_ns": [1540178479],
            "end_ns": [1540180111],
            "duration_ns": [1632],
            "kind": ["memcpy"],
            "copy_kind": ["DtoH"],  # copyKind 2
            "bytes": [4],
            "src_kind": ["Device"],  # srcKind 2 in ENUM_CUDA_MEM_KIND
            "dst_kind": ["Pinned"],  # dstKind 1 (cudaHostAlloc memory)
            "correlation_id": [171],
            "graph_node_id": [None],
            "launch_thread_id": [PID],
            "launch_api": ["cudaMemcpyAsync"],
            "launch_start_ns": [1539568563],
            "launch_end_ns": [1540158067],
        },
        schema_overrides={"device_id": pl.Int32, "graph_node_id": pl.Int64},
    )
    want = want.with_columns(pl.lit(None, pl.Int64).alias("stack_id"))
    assert_frame_equal(_read("memops"), want)
    syncs = _read("syncs")
    assert syncs.select("start_ns", "end_ns", "event_id", "correlation_id").rows() == [
        (1540166277, 1540179933, 4294967295, 172)
    ]


def test_devices_golden() -> None:
    want = pl.DataFrame(
        {
            "device_id": [0],
            "process_id": [None],
            "name": ["NVIDIA GeForce RTX 3080"],
            "sm_count": [68],
            "memory_bytes": [10736893952],
            "bus_location": ["0000:01:00.0"],
            "uuid": ["554a6988-03dd-6206-3dd1-f43fb60a3ed0"],
            "compute_capability": ["8.6"],
            "clock_hz": [1710000000],
        },
        schema_overrides={"device_id": pl.Int32, "process_id": pl.Int64, "sm_count": pl.Int32},
    )
    assert_frame_equal(_read("devices"), want)
