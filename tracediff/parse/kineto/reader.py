"""Kineto trace → Run: reads the file, decodes it a chunk at a time, builds the tables.

Stage: parse. Input: a `.json` / `.json.gz` path; output: a `Run`. The steps are source.py
(bytes, memory budget), segments.py (large files: segments read by two processes; a large gzip
trace is inflated to a temp file first),
events.py (JSON → event records, chunked), roles.py (records → one typed frame per role),
clock.py (µs → exact ns), tables.py (frames → run-file tables).

Time base: Unix ns = `time_origin_utc_ns` + start_ns, where time_origin_utc_ns is the trace's
`baseTimeNanoseconds` (HTA's rule), 0 when `ts` already is Unix µs (2021 schema), else null.
`displayTimeUnit` only sets the viewer's unit: ts stays µs.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pyarrow.compute as pc

from tracediff.base.errors import InputError
from tracediff.parse.ranks import ranknames
from tracediff.runs import schema
from tracediff.runs.runfile import Run

from . import agents, events, graph_stacks, segments, stacks, tables
from .clock import Clock, NeedExact
from .roles import Roles
from .source import Source, read_json_bytes

# the role frames read as one table each, in the order the tables are built: the first problem
# with a time (clock.py) is reported from the first of them that has one
_CLOCK_ORDER = [
    ["runtime", "driver"],
    ["kernel"],
    ["memcpy"],
    ["memset"],
    ["annotation", "step"],
    ["gpu_annotation"],
    ["comms"],
    ["python"],
]
_CLOCK_LABELS = {
    "driver": "runtime",
    "step": "annotation",
    "comms": "record_param_comms",
    "python": "python_function",
}
_ROLES = [r for batch in _CLOCK_ORDER for r in batch if r != "step"]


def read_kineto(path: Path) -> Run:
    """Read a Kineto Chrome trace (.json / .json.gz) into a Run.

    Raises InputError (one line naming the file) for anything that is not a readable trace;
    recoverable oddities (no GPU events, events without dur or ts) become `Run.warnings`.
    """
    path = Path(path)
    # Millions of short-lived records would trigger full GC passes over every decoded one (none
    # of which form cycles); pause the collector while building.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            return _build(path, exact=False)
        except NeedExact:
            pass  # leave the except block first, so the first attempt's frames are freed
        return _build(path, exact=True)
    finally:
        if was_enabled:
            gc.enable()


def _build(path: Path, exact: bool) -> Run:
    src = Source(path)
    try:
        segs = segments.bounds(src)
    finally:
        src.close()
    try:
        try:
            big_gzip = src.gzip and src.size_hint >= segments.GZIP_MIN_BYTES
            if not big_gzip:
                roles, doc = segments.read(path, exact, segs)
            else:
                try:  # inflated to a temp file, its segments read by two processes
                    roles, doc = segments.read_gzip(path, exact, src.size_hint)
                except segments.NoRoom:
                    big_gzip = False  # read in one pass (below, only if that fails)
                    roles, doc = segments.read(path, exact, segs)
        except events.NotChunked:
            if len(segs) == 1 and not big_gzip:
                raise
            # a boundary between segments fell inside a value: one segment tries further cuts
            roles, doc = segments.read(path, exact, [(0, None)])
    except events.NotChunked:
        data = read_json_bytes(path)
        whole = _decode_whole(path, data, exact)
        del data
        roles = _absorb(path, events.whole(whole), exact)
        doc = events.Doc(whole)
    frames = {r: roles.frame(r) for r in _ROLES if r != "python"}
    py = roles.table()  # the Python calls: an Arrow table (Roles.table)
    roles.clock.check(_CLOCK_ORDER, _CLOCK_LABELS)

    warnings: list[str] = []
    if roles.no_ts:
        warnings.append(f"{path}: {roles.no_ts} events have no ts and were skipped")
    if not (frames["kernel"].height or frames["memcpy"].height or frames["memset"].height):
        refuse_range_profile(path)
        warnings.append(
            f"{path}: no GPU kernels, copies or memsets in the trace "
            "(profile with ProfilerActivity.CUDA to record them)"
        )
    mapping, unmatched = agents.agent_map(
        agents.recorded_ids(frames), agents.listed_ids(doc.deviceProperties)
    )
    frames = agents.remap(frames, mapping)
    if unmatched:
        warnings.append(f"{path}: {unmatched}")
    api = tables.api_calls(frames["runtime"], frames["driver"])
    api, stack_tables = stacks.resolve(api, py)
    main_pid = _main_pid(api, frames["comms"] if frames["comms"].height else frames["annotation"])
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
    keys = tables.launch_keys(api)
    kern = tables.kernels(frames["kernel"], keys, main_pid)
    kern, graph_warnings = graph_stacks.assign(kern, api, path)
    warnings += graph_warnings
    out = {
        "kernels": tables.kernel_table(kern),
        "memops": tables.memops(frames["memcpy"], frames["memset"], keys, main_pid),
        "nvtx_ranges": tables.ranges(frames["annotation"], frames["gpu_annotation"], main_pid),
        "collectives": tables.collectives(kern, tables.host_comms(frames["comms"]), rank),
        "api_calls": schema.conform("api_calls", api.drop("stack_id", strict=False).to_arrow())
        if api.height
        else schema.empty("api_calls"),
        "devices": tables.devices(doc.deviceProperties, main_pid),
        **stack_tables,
    }
    if roles.clock.missing_dur:
        warnings.append(
            f"{path}: {roles.clock.missing_dur} events have no dur: their end_ns and "
            "duration_ns are null"
        )
    starts = [
        pc.min(t.column("start_ns")).as_py()
        for t in out.values()
        if "start_ns" in t.column_names and t.num_rows
    ]
    meta = _metadata(path, doc, min(starts) if starts else None)
    meta["event_count"] = roles.n_events
    if mapping:  # recorded for the reader of the run file: ids differ from the trace's
        meta["device_id_map"] = {str(a): d for a, d in mapping.items()}
    return Run(tables=out, metadata=meta, warnings=warnings)


def _absorb(path: Path, pieces: Any, exact: bool) -> Roles:
    roles = Roles(Clock(path, exact))
    for evs in pieces:
        roles.add(evs)
        del evs
    return roles


def _decode_whole(path: Path, data: bytes, exact: bool) -> Any:
    """The whole document in one decode: the fallback, and the source of every JSON error."""
    try:
        doc = events.decode_any(exact, lambda k: k.doc.decode(data))
    except msgspec.ValidationError as e:
        if " - at `" not in str(e):  # msgspec names no path for the top level
            raise InputError(
                f"{path}: JSON is not a Kineto trace (top level is not an object)",
                "give a PyTorch profiler trace (torch.profiler export_chrome_trace)",
            ) from None
        raise InputError(
            f"{path}: unexpected value in Kineto trace: {e}",
            "the trace may be from an unsupported profiler; please report it",
        ) from None
    except RecursionError:
        raise InputError(
            f"{path}: JSON is nested too deeply to be a Kineto trace",
            "the file is corrupt or not a trace",
        ) from None
    except UnicodeDecodeError as e:
        raise InputError(
            f"{path}: not UTF-8 text (byte {e.start}: {e.reason})",
            "Kineto writes UTF-8 JSON; the file is corrupt or not a trace",
        ) from None
    except msgspec.DecodeError as e:
        raise InputError(
            f"{path}: not valid JSON ({e})",
            "the trace may be truncated or not UTF-8; export it again",
        ) from None
    if doc.traceEvents is None:
        raise InputError(
            f"{path}: JSON has no traceEvents: not a Kineto trace",
            "give a PyTorch profiler trace (torch.profiler export_chrome_trace)",
        )
    return doc


def _main_pid(api: pl.DataFrame, cpu: pl.DataFrame) -> int | None:
    """The profiled process: the one that made the most CUDA/HIP API calls."""
    if api.height:
        mode = api["process_id"].drop_nulls().mode()
        if mode.len():
            return int(mode.sort()[0])
    pids = cpu["pid"].drop_nulls()
    return int(pids.mode().sort()[0]) if pids.len() else None


def _metadata(path: Path, doc: Any, first_ts_ns: int | None) -> dict[str, Any]:
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    base = doc.baseTimeNanoseconds if isinstance(doc.baseTimeNanoseconds, int) else None
    if base is None and first_ts_ns is not None and first_ts_ns > 10**18:
        base = 0  # 2021-schema traces: ts is already Unix µs (after 2001-09)
    return {
        "source": str(path),
        "source_format": "kineto",
        "kineto_schema_version": doc.schemaVersion,
        "platform": "rocm"
        if doc.roctracer_version is not None or doc.hip_runtime_version is not None
        else "cuda",
        "rank": dist.get("rank"),
        "host": ranknames.profiler_host(path),  # the trace names none; its default file name does
        "world_size": dist.get("world_size"),
        "distributed_backend": dist.get("backend"),
        "cuda_driver_version": doc.cuda_driver_version,
        "cuda_runtime_version": doc.cuda_runtime_version,
        "cupti_version": doc.cupti_version,
        "hip_runtime_version": doc.hip_runtime_version,
        "hip_driver_version": doc.hip_driver_version,
        "nccl_version": dist.get("nccl_version"),
        "trace_id": doc.trace_id,
        "time_origin_utc_ns": base,
        "time_base": "kineto clock: ts (µs) × 1000, exact; Unix ns = time_origin_utc_ns + *_ns "
        "(time_origin_utc_ns = baseTimeNanoseconds; 0 when ts is Unix µs; null if unknown)",
    }


RANGE_PROFILE_MARK = b'"cuda_profiler_range"'


def refuse_range_profile(path: Path) -> None:
    """A trace with no kernel but CUPTI range-profiler events: torch.profiler ran with the range
    profiler (experimental_config's profiler_metrics), which records a metric range per kernel
    and no kernel activity. The generic hint (ProfilerActivity.CUDA) is wrong for it (#17).
    Searched in the raw text (only for a trace with no GPU event, so rarely read twice)."""
    import gzip
    import zlib

    tail = b""
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == b"\x1f\x8b"
        with gzip.open(path, "rb") if gz else open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                if RANGE_PROFILE_MARK in tail + chunk:
                    break
                tail = chunk[-len(RANGE_PROFILE_MARK) :]
            else:
                return
    except (OSError, EOFError, zlib.error):
        return
    raise InputError(
        f"{path}: a CUPTI range-profiler trace: kernels appear only as cuda_profiler_range "
        "metric ranges, with no kernel timings",
        "profile without the range profiler (no experimental_config profiler_metrics), with "
        "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
    )
