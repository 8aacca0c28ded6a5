"""Nsight Systems export vocabulary: table names, column names and types, enum values.

Stage: parse (nsys). The one place that spells nsys table and column names; the readers
(`source`), the per-table builders (`tables`, `nvtx`) and `reader.read_nsys`
take them from here. Features are detected by table and column presence, never by version string.
"""

from __future__ import annotations

import polars as pl

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
GPU = "TARGET_INFO_GPU"
STRINGS = "StringIds"
PAYLOAD_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")  # 2023.4+ / up to 2022.x

# NVTX eventType values (ENUM_NSYS_EVENT_TYPE, stable across 2022.4-2026.4)
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN = 34, 59, 60, 75
RANGE_KINDS = {NVTX_MARK: "mark", NVTX_PUSHPOP: "push_pop", NVTX_STARTEND: "start_end"}

# Used when a report lacks its ENUM_* tables (old exports); values from the 2024.2 enums.
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
               8: "DtoD", 9: "HtoH", 10: "PtoP"}  # fmt: skip
# nsys's own ENUM_CUDA_MEM_KIND numbering (not CUPTI's): checked on 2022.2, 2024.2 and 2026.1 data
MEM_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
              5: "Device Static", 6: "Managed Static", 7: "Unknown"}  # fmt: skip
# ENUM_CUPTI_SYNC_TYPE labels. Wrong before schema 3.2x: in 2024.2 (3.11) exports syncType 3
# ("stream") sits on cudaStreamWaitEvent calls and 2 ("stream wait") on cudaEventQuery, in a
# 2024.6 (3.16) export 2 on cudaStreamSynchronize; 2026.2 (3.25, which adds deprecatedSyncType)
# writes CUPTI's values (1 cudaEventQuery, 2 cudaStreamWaitEvent, 3 cudaStreamSynchronize).
# events.py tells stream waits by their API call instead.
SYNC_KINDS = {1: "event", 2: "stream_wait", 3: "stream", 4: "context"}
KNOWN_SCHEMA_MAJOR = 3

I64, STR, F64 = pl.Int64(), pl.String(), pl.Float64()
TID_BITS = 1 << 24  # globalTid = (pid << 24) + tid, globalPid = pid << 24


def ints(*names: str) -> dict[str, pl.DataType]:
    return {n: I64 for n in names}


KERNEL_COLS = ints(
    "start", "end", "streamId", "correlationId", "globalPid", "graphNodeId",
) | {  # int32 as in the run file (and in nsys's Parquet): no cast there and back; the name ids
    # as the name columns' dictionary indices are (columns.Strings.lookup)
    c: pl.Int32() for c in ("deviceId", "demangledName", "shortName", "gridX", "gridY", "gridZ",
                            "blockX", "blockY", "blockZ", "registersPerThread",
                            "staticSharedMemory", "dynamicSharedMemory")
}  # fmt: skip
KERNEL_LATER = (
    "graphNodeId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
    "staticSharedMemory", "dynamicSharedMemory",
)  # fmt: skip
"""Kernel columns a report's `compare` never reads: from a SQLite export they are decoded when
first needed (reader.py; runs/deferred.py's `Partial`)."""
RUNTIME_COLS = ints("start", "end", "eventClass", "globalTid", "correlationId") | {
    "nameId": pl.Int32(),  # a dictionary index, as the launches' `launch_api` (Strings.lookup)
    "returnValue": I64,
}
API_LATER = ("eventClass", "returnValue")
"""CUDA API columns only the `api_calls` table reads (which a report's `compare` never builds):
from a SQLite export they are decoded when it is built (reader.py)."""
_MEM_COLS = ints(
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "graphNodeId"
)
MEMCPY_COLS = _MEM_COLS | ints("copyKind", "srcKind", "dstKind")
MEMSET_COLS = _MEM_COLS | ints("memKind")
SYNC_COLS = ints(
    "start", "end", "deviceId", "streamId", "globalPid", "syncType", "eventId", "correlationId"
)
NVTX_COLS = (
    ints("start", "end", "eventType", "globalTid", "endGlobalTid")
    | {"text": STR}
    | ints(
        "textId", "domainId", "category", "int64Value", "uint64Value", "int32Value", "uint32Value"
    )
    | {"doubleValue": F64, "floatValue": F64}
)
GPU_COLS = {"id": I64, "name": STR, "smCount": I64, "totalMemory": I64, "busLocation": STR,
             "uuid": STR, "computeMajor": I64, "computeMinor": I64, "clockRate": I64}  # fmt: skip
ENUM_COLS = {"id": I64, "name": STR, "label": STR}
NAME_VALUE = {"name": STR, "value": STR}
PAYLOAD_COLS = {"domainId": I64, "schemaId": I64, "name": STR}
