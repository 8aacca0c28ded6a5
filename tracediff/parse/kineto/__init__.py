"""PyTorch profiler (Kineto) Chrome trace → run-file tables.

Stage: parse. Input: a Kineto trace, `.json` or `.json.gz`: the current schema (categories
`kernel`, `cuda_runtime`, ...), the 2021 one (`Kernel`, `Runtime`, `Operator`, ...), CUDA and
ROCm (hip*) traces. Output: a `Run` with the tables of `tracediff.runs.schema`.

This package is the only place that knows Kineto field names, and fields.py the only module
in it that spells the categories and args keys read (both roles.py and scan.py take them from
there). reader.py runs the steps:
source.py (file → JSON bytes, refused when larger than memory), segments.py (a file of over
128 MB of JSON split into 64 MB segments, read by this process and one worker process at once; a
gzip one inflated into a temp file first, its segments handed out as the inflate passes them),
events.py (JSON → typed event records, one 4 MB chunk of traceEvents at a time), roles.py
(records → one typed polars frame per role, so no record outlives its chunk; or scan.py, the
native scanner, JSON → the same columns), clock.py (µs →
exact int64 ns; loosely typed ids → int64), tables.py (frames → kernels, memops, nvtx_ranges,
collectives, api_calls, devices).
bench/kineto_ingest.py measures speed and memory.
"""

from .reader import read_kineto
from .source import PEAK_PER_JSON_BYTE, memory_budget
from .tables import short_name

__all__ = ["PEAK_PER_JSON_BYTE", "memory_budget", "read_kineto", "short_name"]
